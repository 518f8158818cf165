package memcachebackend_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	memcachebackend "github.com/errand-go/errand/backends/memcache"
	"github.com/errand-go/errand/driver"
)

// wire records the commands a client sends and the bytes it receives.
type wire struct {
	mu   sync.Mutex
	cmds []string // each command line, without its data block
	read atomic.Int64
}

func (w *wire) reset() ([]string, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cmds := w.cmds
	w.cmds = nil
	return cmds, w.read.Swap(0)
}

var verbs = []string{"get ", "gets ", "set ", "add ", "cas ", "incr ", "decr ", "touch ", "delete "}

type wireConn struct {
	net.Conn
	w *wire
}

// Write records the command lines in p; gomemcache writes whole commands.
// A data block (after set, add or cas) never starts with a verb here.
func (c wireConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	for line := range bytes.Lines(p) {
		s := strings.TrimRight(string(line), "\r\n")
		if slices.ContainsFunc(verbs, func(v string) bool { return strings.HasPrefix(s, v) }) {
			c.w.cmds = append(c.w.cmds, s)
		}
	}
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

func (c wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.w.read.Add(int64(n))
	return n, err
}

// wiredClient is client(t) with every connection recorded by w.
func wiredClient(t *testing.T, w *wire) *gomemcache.Client {
	client(t) // skips or fails when memcached is unreachable
	mc := gomemcache.New(strings.Split(os.Getenv("ERRAND_MEMCACHE_ADDRS"), ",")...)
	mc.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wireConn{Conn: conn, w: w}, nil
	}
	t.Cleanup(func() { mc.Close() })
	return mc
}

// members returns n member UUIDs of one length, so that calls naming them
// have the same size whatever n is.
func members(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = rand.Text()
	}
	return ids
}

// TestGroupCompletionIsO1 completes a member of a 2-member group and of a
// 1000-member group: both must send the same commands and receive about the
// same bytes (the 1000-member list alone is over 38 KB).
func TestGroupCompletionIsO1(t *testing.T) {
	t.Parallel()
	w := &wire{}
	b := memcachebackend.New(wiredClient(t, w), &memcachebackend.Options{Prefix: "errand-test-o1"})
	ctx := context.Background()
	type call struct {
		cmds []string
		read int64
	}
	complete := func(size int, redeliver bool) call {
		g, ids := rand.Text(), members(size)
		if err := b.InitGroup(ctx, g, ids); err != nil {
			t.Fatal(err)
		}
		if redeliver {
			if _, _, err := b.CompleteGroupMember(ctx, g, ids[0]); err != nil {
				t.Fatal(err)
			}
		}
		w.reset()
		d, n, err := b.CompleteGroupMember(ctx, g, ids[0])
		if err != nil || d != 1 || n != size {
			t.Fatalf("completing a member of a %d-member group returned %d/%d, %v; want 1/%d", size, d, n, err, size)
		}
		cmds, read := w.reset()
		// Compare the commands' shapes: the same verbs on the same kinds of key.
		for i, c := range cmds {
			cmds[i] = strings.NewReplacer(g, "G", ids[0], "M").Replace(c)
		}
		return call{cmds, read}
	}
	for _, redeliver := range []bool{false, true} {
		small, big := complete(2, redeliver), complete(1000, redeliver)
		t.Logf("redelivery %v: a completion sends %d commands %q and receives %d bytes (2 members) / %d bytes (1000 members)",
			redeliver, len(big.cmds), big.cmds, small.read, big.read)
		if !slices.Equal(small.cmds, big.cmds) {
			t.Fatalf("O(1) group promise broken (redelivery %v): completing a member of a 1000-member group sent %q, of a 2-member group %q; a completion must cost the same whatever the group's size",
				redeliver, big.cmds, small.cmds)
		}
		// The group size is the only value that grows: "2" against "1000".
		if big.read > small.read+8 {
			t.Fatalf("O(1) group promise broken (redelivery %v): completing a member of a 1000-member group received %d bytes, of a 2-member group %d; a completion must not read the member list",
				redeliver, big.read, small.read)
		}
		for _, c := range big.cmds {
			if strings.HasPrefix(c, "get") && strings.HasSuffix(c, ":members") {
				t.Fatalf("O(1) group promise broken: a completion read the member list (%q)", c)
			}
		}
	}
}

// TestNonMemberDoesNotCount: completing a UUID that is not in the group
// fails and leaves the count alone, however often it is tried.
func TestNonMemberDoesNotCount(t *testing.T) {
	t.Parallel()
	b := memcachebackend.New(client(t), &memcachebackend.Options{Prefix: "errand-test-nonmember"})
	ctx := context.Background()
	g, ids := rand.Text(), members(3)
	if err := b.InitGroup(ctx, g, ids); err != nil {
		t.Fatal(err)
	}
	stranger := rand.Text()
	for i := range 3 {
		d, n, err := b.CompleteGroupMember(ctx, g, stranger)
		if !errors.Is(err, driver.ErrNotMember) || !strings.Contains(err.Error(), stranger) {
			t.Fatalf("membership promise broken: completing non-member %s returned %d/%d, %v; want an error wrapping ErrNotMember that names it", stranger, d, n, err)
		}
		if d, n, err := b.CompleteGroupMember(ctx, g, ids[i]); err != nil || d != i+1 || n != 3 {
			t.Fatalf("membership promise broken: after %d non-member completions, member %d's completion returned %d/%d, %v; want %d/3 (a non-member must not count)", i+1, i, d, n, err, i+1)
		}
	}
	// Another group's member is not this group's member either.
	g2, ids2 := rand.Text(), members(2)
	if err := b.InitGroup(ctx, g2, ids2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.CompleteGroupMember(ctx, g2, ids[0]); !errors.Is(err, driver.ErrNotMember) {
		t.Fatalf("membership promise broken: completing group %s's member in group %s returned %v; want ErrNotMember", g, g2, err)
	}
	if d, n, err := b.CompleteGroupMember(ctx, g2, ids2[0]); err != nil || d != 1 || n != 2 {
		t.Fatalf("membership promise broken: group %s's first member completion returned %d/%d, %v; want 1/2", g2, d, n, err)
	}
	if _, _, err := b.CompleteGroupMember(ctx, rand.Text(), ids[0]); !errors.Is(err, driver.ErrGroupNotFound) {
		t.Fatalf("completing a member of an unknown group returned %v; want ErrGroupNotFound", err)
	}
}

// TestLostMemberItemFailsTheGroup: a member whose own item was evicted or
// expired cannot be counted; its completion must say the group cannot
// complete (ErrGroupNotFound, so the chord fails) and not pass it off as a
// stray (ErrNotMember, which the worker ignores, leaving the chord PENDING
// for ever).
func TestLostMemberItemFailsTheGroup(t *testing.T) {
	t.Parallel()
	mc := client(t)
	b := memcachebackend.New(mc, &memcachebackend.Options{Prefix: "errand-test-lost"})
	ctx := context.Background()
	g, ids := rand.Text(), members(3)
	if err := b.InitGroup(ctx, g, ids); err != nil {
		t.Fatal(err)
	}
	if err := mc.Delete(fmt.Sprintf("errand-test-lost:group:%s:member:%s", g, ids[1])); err != nil {
		t.Fatal(err)
	}
	d, n, err := b.CompleteGroupMember(ctx, g, ids[1])
	if !errors.Is(err, driver.ErrGroupNotFound) || errors.Is(err, driver.ErrNotMember) || !strings.Contains(err.Error(), ids[1]) {
		t.Fatalf("lossy storage promise broken: a member whose item was evicted completed %d/%d, %v; want ErrGroupNotFound naming it, never ErrNotMember", d, n, err)
	}
	if d, n, err := b.CompleteGroupMember(ctx, g, ids[0]); err != nil || d != 1 || n != 3 {
		t.Fatalf("the next member completed %d/%d, %v; want 1/3", d, n, err)
	}
}

// TestGroupSizeNeedsNoMemberList: the member list (read only when the chord
// fires) can be gone without completions noticing; the group size has its
// own item.
func TestGroupSizeNeedsNoMemberList(t *testing.T) {
	t.Parallel()
	mc := client(t)
	b := memcachebackend.New(mc, &memcachebackend.Options{Prefix: "errand-test-size"})
	ctx := context.Background()
	g, ids := rand.Text(), members(4)
	if err := b.InitGroup(ctx, g, ids); err != nil {
		t.Fatal(err)
	}
	if err := mc.Delete(fmt.Sprintf("errand-test-size:group:%s:members", g)); err != nil {
		t.Fatal(err)
	}
	if d, n, err := b.CompleteGroupMember(ctx, g, ids[0]); err != nil || d != 1 || n != 4 {
		t.Fatalf("O(1) group promise broken: with the member list deleted, a completion returned %d/%d, %v; want 1/4 from the group size item", d, n, err)
	}
}

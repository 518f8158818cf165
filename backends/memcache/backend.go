package memcachebackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/errand-go/errand/driver"
)

// Options configures a Backend.
type Options struct {
	// Prefix starts every key. Default: "errand".
	Prefix string
	// ResultExpiry is how long a state is kept after its last write (rounded
	// up to whole seconds, plus one). Default: 1h.
	ResultExpiry time.Duration
	// GroupExpiry is how long group metadata is kept after the group's last
	// completion, and how long after InitGroup each member has to complete
	// for the first time (its own item is touched only by its completion).
	// Default: 24h; never less than ResultExpiry.
	GroupExpiry time.Duration
	// MaxItemSize is the largest item the server stores (memcached -I).
	// Default: 1 MiB.
	MaxItemSize int
	// CloseClient: Close also closes the client (set by Open).
	CloseClient bool
}

// Backend is a driver.Backend on memcached. It is safe for concurrent use.
type Backend struct {
	mc     *memcache.Client
	opts   Options
	closed atomic.Bool
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Expirer = (*Backend)(nil)
)

// New returns a backend on mc. opts may be nil.
func New(mc *memcache.Client, opts *Options) *Backend {
	b := &Backend{mc: mc}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.Prefix == "" {
		b.opts.Prefix = "errand"
	}
	b.opts.ResultExpiry, b.opts.GroupExpiry = driver.ExpiryDefaults(b.opts.ResultExpiry, b.opts.GroupExpiry)
	if b.opts.MaxItemSize <= 0 {
		b.opts.MaxItemSize = 1 << 20
	}
	return b
}

func init() { driver.RegisterBackend("memcache", Open) }

// Open returns a backend for a memcache:// URL (see the package doc).
//
// timeout=DURATION sets the client's per-call socket timeout (gomemcache's
// Client.Timeout, default 500ms): gomemcache takes no ctx, so this is what
// bounds every call, the open's ping included.
func Open(_ context.Context, u *url.URL) (driver.Backend, error) {
	if u.Host == "" {
		return nil, errors.New("memcache backend: URL names no server")
	}
	opts := &Options{CloseClient: true, Prefix: u.Query().Get("prefix")}
	var timeout time.Duration
	if err := driver.DurationParams(u.Query(), map[string]*time.Duration{"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry, "timeout": &timeout}); err != nil {
		return nil, fmt.Errorf("memcache backend: %w", err)
	}
	mc := memcache.New(strings.Split(u.Host, ",")...)
	if timeout > 0 {
		mc.Timeout = timeout // gomemcache's per-call socket timeout (default 500ms)
	}
	if err := mc.Ping(); err != nil {
		mc.Close()
		return nil, fmt.Errorf("memcache backend: ping %s: %w", u.Host, err)
	}
	return New(mc, opts), nil
}

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

// seconds converts an expiry to memcached's whole seconds, never early.
// memcached reads more than 30 days as an absolute Unix time.
func seconds(d time.Duration) int32 {
	s := int64((d+time.Second-1)/time.Second) + 1
	if s > 30*24*3600 {
		s += time.Now().Unix()
	}
	return int32(s)
}

func (b *Backend) taskKey(id string) string { return b.opts.Prefix + ":task:" + id }
func (b *Backend) groupKey(g, part string) string {
	return b.opts.Prefix + ":group:" + g + ":" + part
}
func (b *Backend) memberKey(g, id string) string { return b.groupKey(g, "member:"+id) }

func (b *Backend) err(err error) error {
	switch {
	case err == nil:
		return nil
	case b.closed.Load():
		return fmt.Errorf("memcache backend: %w", driver.ErrClosed)
	}
	return fmt.Errorf("memcache backend: %w", err)
}

func (b *Backend) check(ctx context.Context) error {
	return ctx.Err()
}

func (b *Backend) item(key string, v []byte, exp time.Duration) (*memcache.Item, error) {
	if len(v)+len(key)+64 > b.opts.MaxItemSize {
		return nil, fmt.Errorf("memcache backend: %s is %d bytes, over the item size limit of %d bytes (memcached -I)", key, len(v), b.opts.MaxItemSize)
	}
	return &memcache.Item{Key: key, Value: v, Expiration: seconds(exp)}, nil
}

// SetStates writes each state as one item, one after the other, in
// order; a state whose write fails (one over the item size limit) fails
// alone.
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	return driver.EachItem(len(sts), func(i int) error { return b.setState(ctx, sts[i]) })
}

// setState writes st as one item.
func (b *Backend) setState(ctx context.Context, st *driver.TaskState) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	v, err := json.Marshal(stateItem{TaskState: st, Progress: string(st.Progress)})
	if err != nil {
		return fmt.Errorf("memcache backend: encode state of %s: %w", st.TaskUUID, err)
	}
	it, err := b.item(b.taskKey(st.TaskUUID), v, b.opts.ResultExpiry)
	if err != nil {
		return err
	}
	return b.err(b.mc.Set(it))
}

// GetState reads the task's state.
func (b *Backend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	it, err := b.mc.Get(b.taskKey(id))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, fmt.Errorf("memcache backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	if err != nil {
		return nil, b.err(err)
	}
	return decodeState(id, it.Value)
}

// stateItem is a state's item: the state's JSON, its Progress as a JSON
// string of its bytes (encoded as it is, json.Marshal would compact it),
// so that it comes back byte for byte.
type stateItem struct {
	*driver.TaskState
	Progress string `json:"progress,omitempty"` // hides TaskState's
}

func decodeState(id string, v []byte) (*driver.TaskState, error) {
	it := stateItem{TaskState: &driver.TaskState{}}
	if err := json.Unmarshal(v, &it); err != nil {
		return nil, fmt.Errorf("memcache backend: decode state of %s: %w", id, err)
	}
	if it.Progress != "" {
		it.TaskState.Progress = json.RawMessage(it.Progress)
	}
	return it.TaskState, nil
}

// InitGroup writes, for a group of N members, N+3 items, all expiring
// GroupExpiry from now: one per member (its completion counter, "0", so that
// CompleteGroupMember can check membership and count a member once without
// reading the member list), the group's counter, the member list (read only
// by GroupStates) and, last, the group size, whose presence says the group
// exists. It checks the member list against the item size limit before
// writing anything. Member items are written by up to 8 goroutines at once
// (one connection each); each write is bounded by the client's Timeout, ctx
// is checked between writes, and nothing is retried: on an error the group is
// not usable and InitGroup must be called again.
func (b *Backend) InitGroup(ctx context.Context, g string, ids []string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	v, _ := json.Marshal(ids)
	members, err := b.item(b.groupKey(g, "members"), v, b.opts.GroupExpiry)
	if err != nil {
		return fmt.Errorf("%w (a group of %d members)", err, len(ids))
	}
	items := make([]*memcache.Item, len(ids))
	for i, id := range ids {
		items[i], _ = b.item(b.memberKey(g, id), []byte("0"), b.opts.GroupExpiry)
	}
	if err := b.setAll(ctx, items); err != nil {
		return err
	}
	count, _ := b.item(b.groupKey(g, "count"), []byte("0"), b.opts.GroupExpiry)
	total, _ := b.item(b.groupKey(g, "total"), []byte(strconv.Itoa(len(ids))), b.opts.GroupExpiry)
	for _, it := range []*memcache.Item{count, members, total} {
		if err := b.mc.Set(it); err != nil {
			return b.err(err)
		}
	}
	return nil
}

// setAll sets items, one goroutine per 64 items and at most 8, and returns
// the first error.
func (b *Backend) setAll(ctx context.Context, items []*memcache.Item) error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		ferr error
		wg   sync.WaitGroup
	)
	for range min(8, (len(items)+63)/64) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(items); i = int(next.Add(1)) - 1 {
				err := ctx.Err()
				if err == nil {
					err = b.err(b.mc.Set(items[i]))
				}
				if err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
					next.Store(int64(len(items))) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return ferr
}

func (b *Backend) members(g string) ([]string, error) {
	it, err := b.mc.Get(b.groupKey(g, "members"))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, fmt.Errorf("memcache backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	if err != nil {
		return nil, b.err(err)
	}
	var ids []string
	if err := json.Unmarshal(it.Value, &ids); err != nil {
		return nil, fmt.Errorf("memcache backend: group %s: decode members: %w", g, err)
	}
	return ids, nil
}

// number reads one of the group's numeric items (its size or its counter).
func (b *Backend) number(g, part string) (uint64, error) {
	it, err := b.mc.Get(b.groupKey(g, part))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return 0, fmt.Errorf("memcache backend: group %s: %s: %w", g, part, driver.ErrGroupNotFound)
	}
	if err != nil {
		return 0, b.err(err)
	}
	// memcached may pad a number it rewrote in place with spaces.
	n, err := strconv.ParseUint(strings.TrimSpace(string(it.Value)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memcache backend: group %s: decode %s: %w", g, part, err)
	}
	return n, nil
}

// CompleteGroupMember makes the same few calls whatever the group's size,
// and never reads the member list: it gets the group size, increments the
// member's own item (written "0" by InitGroup), and only if that increment
// returned 1 increments the group's counter; otherwise it gets the counter.
// So a redelivered member, even racing its first delivery, counts once, and
// a UUID that has no member item counts never. It then touches the group's
// items and the member's, so the group lives GroupExpiry after its last
// completion.
//
// A missing group size is driver.ErrGroupNotFound. A missing member item
// means either a UUID that was never a member (a stray) or a member whose
// item was evicted or expired (a member item is touched only by that
// member's completion); memcached cannot tell them apart from the item
// alone, so on that path only, CompleteGroupMember reads the member list
// once: a UUID in it lost its item, and the chord can never complete
// (driver.ErrGroupNotFound, so the chord fails instead of hanging); a UUID
// not in it is a stray (driver.ErrNotMember, nothing counted). A completion
// that counts never reads the list.
//
// It may be called concurrently. Each call is bounded by the client's
// Timeout and nothing is retried; if the counter increment fails, the
// member's item is reset to "0" so that a redelivery counts the member
// (should the failed increment have been applied, the member then counts
// twice and the chord fires early, seeing that member unfinished). A process
// that dies between the two increments leaves the member uncounted: see
// "Lossy storage" in the package doc.
func (b *Backend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	if err := b.check(ctx); err != nil {
		return 0, 0, err
	}
	total, err := b.number(g, "total")
	if err != nil {
		return 0, 0, err
	}
	member := b.memberKey(g, id)
	n, err := b.mc.Increment(member, 1)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return 0, 0, b.noMemberItem(g, id)
	}
	if err != nil {
		return 0, 0, b.err(err)
	}
	var done uint64
	if n == 1 { // this member's first completion
		if done, err = b.mc.Increment(b.groupKey(g, "count"), 1); errors.Is(err, memcache.ErrCacheMiss) {
			return 0, 0, fmt.Errorf("memcache backend: group %s: count: %w", g, driver.ErrGroupNotFound)
		} else if err != nil {
			reset, _ := b.item(member, []byte("0"), b.opts.GroupExpiry)
			b.mc.Set(reset) // so a redelivery counts it again
			return 0, 0, b.err(err)
		}
	} else if done, err = b.number(g, "count"); err != nil { // counted before: a redelivery
		return 0, 0, err
	}
	exp := seconds(b.opts.GroupExpiry)
	b.mc.Touch(member, exp)
	for _, part := range []string{"total", "count", "members", "claim"} {
		b.mc.Touch(b.groupKey(g, part), exp) // a missing claim is fine
	}
	return int(done), int(total), nil
}

// noMemberItem tells, for a completion that found no member item, a stray
// (driver.ErrNotMember) from a member whose item is gone
// (driver.ErrGroupNotFound), by reading the member list. Only this path
// reads it.
func (b *Backend) noMemberItem(g, id string) error {
	ids, err := b.members(g)
	if err != nil {
		return err
	}
	if slices.Contains(ids, id) {
		return fmt.Errorf("memcache backend: group %s: member %s lost its item (expired or evicted), so the group can never complete: %w", g, id, driver.ErrGroupNotFound)
	}
	return fmt.Errorf("memcache backend: task %s, group %s: %w", id, g, driver.ErrNotMember)
}

// ClaimChord adds the claim item; the claimer stored in it wins.
func (b *Backend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	if err := b.check(ctx); err != nil {
		return false, err
	}
	if _, err := b.number(g, "total"); err != nil {
		return false, err
	}
	claim, _ := b.item(b.groupKey(g, "claim"), []byte(claimer), b.opts.GroupExpiry)
	switch err := b.mc.Add(claim); {
	case err == nil:
		return true, nil
	case !errors.Is(err, memcache.ErrNotStored):
		return false, b.err(err)
	}
	it, err := b.mc.Get(claim.Key)
	if err != nil {
		return false, b.err(err)
	}
	return string(it.Value) == claimer, nil
}

// GroupStates reads the member list, then every state in one GetMulti.
func (b *Backend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	ids, err := b.members(g)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = b.taskKey(id)
	}
	items, err := b.mc.GetMulti(keys)
	if err != nil {
		return nil, b.err(err)
	}
	out := make([]*driver.TaskState, len(ids))
	for i, id := range ids {
		it, ok := items[keys[i]]
		if !ok {
			out[i] = &driver.TaskState{TaskUUID: id, State: driver.StatePending}
			continue
		}
		if out[i], err = decodeState(id, it.Value); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Close makes later calls return driver.ErrClosed; it closes the client only
// if Options.CloseClient.
func (b *Backend) Close() error {
	if b.closed.Swap(true) || !b.opts.CloseClient {
		return nil
	}
	return b.mc.Close()
}

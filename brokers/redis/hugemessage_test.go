package redisbroker_test

// Issue 31, item 5: a message of several hundred MB that reached a queue
// (a foreign producer's text on the pending list, or an envelope published
// through a broker with no bound) is set aside by the fetch script without
// stalling the server for the other clients, and the archive still lists:
// a bounded preview of each body with its full size. On a private
// redis-server: the test holds the server for as long as the set-aside
// takes, which a shared server's other users must never see.

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// hugeSize is the size of each huge message: several hundred MB, under
// Redis's 512 MB bound on one string.
const hugeSize = 300 << 20

// hugeHead starts each huge body, so that a preview can be recognised.
const hugeHead = `{"foreign":"a producer without a bound"`

// privateRedis starts a redis-server of the test's own (no persistence)
// and returns a client of it.
func privateRedis(t *testing.T) *goredis.Client {
	t.Helper()
	addr, _ := redistest.PrivateServer(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// hugeString makes key a string of hugeSize bytes starting with hugeHead,
// on the server itself (SETRANGE pads with zero bytes), so the test never
// holds it.
func hugeString(ctx context.Context, t *testing.T, rdb *goredis.Client, key, head string) {
	t.Helper()
	if err := rdb.SetRange(ctx, key, hugeSize+int64(len(head)-len(hugeHead))-1, "}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SetRange(ctx, key, 0, head).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestHugeMessageSetAside: with a 300 MB text pushed onto a queue's pending
// list, a worker's Fetch (default MaxPayload) sets it aside while another
// client pings the server, and no ping waits much longer than Redis takes
// to read the text once (measured on the same server just before): Redis
// has no command that measures or reads part of a list element, so the
// fetch script's pop of it is the floor. Before, the script copied the
// text into the archive inside Redis, and every other client waited ten
// times as long (13 s on this machine). Then a 300 MB envelope published
// through an unbounded broker is set aside too, and Server.List of the
// archive answers with a bounded preview of each body and its full size,
// and the small message behind them is delivered.
func TestHugeMessageSetAside(t *testing.T) {
	rdb := privateRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "huge"
	k := "{" + prefix + ":q}:"

	// The floor: one read of a 300 MB string inside Redis.
	hugeString(ctx, t, rdb, "tmp:foreign", hugeHead)
	began := time.Now()
	if n, err := rdb.Eval(ctx, `return #redis.call('GET', KEYS[1])`, []string{"tmp:foreign"}).Int(); err != nil || n != hugeSize {
		t.Fatalf("reading the huge string: %d bytes, %v", n, err)
	}
	read := time.Since(began)
	// The foreign text: an RPUSH of the string's value, copied on the
	// server, so the test never holds it.
	push := goredis.NewScript(`redis.call('RPUSH', KEYS[2], redis.call('GET', KEYS[1])) return redis.call('DEL', KEYS[1])`)
	if err := push.Run(ctx, rdb, []string{"tmp:foreign", k + "pending"}).Err(); err != nil {
		t.Fatal(err)
	}
	unbounded := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, MaxPayload: -1})
	defer unbounded.Close()
	if err := unbounded.Publish(ctx, driver.Message{ID: "small", Queue: "q", Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}

	// Another client pings the server all through the fetch; the longest
	// wait for a PONG is what every other client of the server saw.
	pinger := goredis.NewClient(&goredis.Options{Addr: rdb.Options().Addr, ReadTimeout: 2 * time.Minute, PoolSize: 1})
	defer pinger.Close()
	if err := pinger.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		longest time.Duration
		pings   int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			began := time.Now()
			if err := pinger.Ping(ctx).Err(); err != nil {
				return
			}
			longest = max(longest, time.Since(began))
			pings++
		}
	}()
	consumer := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CallTimeout: 2 * time.Minute})
	defer consumer.Close()
	began = time.Now()
	ds, err := consumer.Fetch(ctx, "q", 10, time.Minute)
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("large-message promise broken: Fetch of a queue holding a 300 MB text failed: %v", err)
	}
	if len(ds) != 1 || ds[0].ID != "small" {
		t.Fatalf("large-message promise broken: Fetch delivered %d messages; want only the small one", len(ds))
	}
	ackOne(ctx, consumer, ds[0])
	t.Logf("one read of 300 MB inside Redis took %v; the fetch that set 300 MB aside took %v, and another client's longest wait for a PONG was %v (%d pings)", read, took, longest, pings)
	// A bound against a stall: a few times the floor, far below what
	// copying the text inside Redis took.
	if bound := 3*read + time.Second; longest > bound {
		t.Errorf("large-message promise broken: setting a 300 MB text aside held the server: another client's PING waited up to %v (bound %v: three times one read of 300 MB inside Redis, %v, plus 1s); the set-aside must not copy the body", longest, bound, read)
	}

	// The envelope (task ID, newline, body), as an unbounded broker
	// publishes it: published small, then its envelope replaced on the
	// server by the huge one.
	if err := unbounded.Publish(ctx, driver.Message{ID: "big", Queue: "q", Body: []byte("{}")},
		driver.Message{ID: "small2", Queue: "q", Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	mid, err := rdb.HGet(ctx, k+"ids", "big").Result()
	if err != nil {
		t.Fatal(err)
	}
	hugeString(ctx, t, rdb, "tmp:env", "big\n"+hugeHead)
	swap := goredis.NewScript(`redis.call('HSET', KEYS[2], ARGV[1], redis.call('GET', KEYS[1])) return redis.call('DEL', KEYS[1])`)
	if err := swap.Run(ctx, rdb, []string{"tmp:env", k + "msgs"}, mid).Err(); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	ds, err = consumer.Fetch(ctx, "q", 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "small2" {
		t.Fatalf("large-message promise broken: Fetch of a queue holding a 300 MB envelope and a small message: %d deliveries, %v; want the small one only", len(ds), err)
	}
	t.Logf("the fetch that set a 300 MB envelope aside took %v", time.Since(began))
	ackOne(ctx, consumer, ds[0])

	// Server.List of the archive: each body a bounded preview, with the
	// full size.
	srv, err := errand.NewServer(errand.Config{Broker: consumer, Backend: memorybackend.New(nil), DefaultQueue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	tasks, err := srv.List(lctx, "q", errand.ListArchived, 0, 10)
	if err != nil {
		t.Fatalf("large-message promise broken: Server.List of the archive failed: %v", err)
	}
	if len(tasks) != 2 {
		t.Fatalf("large-message promise broken: the archive lists %d entries; want the 2 set aside", len(tasks))
	}
	for _, ti := range tasks {
		e := ti.Archive
		if e == nil || e.Size != hugeSize || len(e.Body) > redisbroker.ArchivePreview || !strings.HasPrefix(string(e.Body), hugeHead) {
			t.Errorf("large-message promise broken: archived %q lists size %d with a body of %d bytes; want its full size %d and a preview of at most %d bytes starting %q",
				ti.ID, e.Size, len(e.Body), hugeSize, redisbroker.ArchivePreview, hugeHead)
		}
		if !strings.Contains(e.Reason, "over the broker's MaxPayload") {
			t.Errorf("archived %q: reason %q does not say why it was set aside", ti.ID, e.Reason)
		}
	}
	// One entry, on request: the same (only the preview was kept), and
	// Requeue refuses it rather than send a truncated message.
	ti, err := srv.ArchivedTask(lctx, "q", "big")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Archive.Size != hugeSize {
		t.Errorf("ArchivedTask of the set-aside message: size %d, want %d", ti.Archive.Size, hugeSize)
	}
	if err := srv.Requeue(lctx, "q", "big"); err == nil || errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("Requeue of a message of which only a preview was kept: %v; want a refusal saying so", err)
	}
	if n, err := srv.RequeueAll(lctx, "q", ""); n != 0 || err == nil || !strings.Contains(err.Error(), "2 archived tasks left in the archive") {
		t.Errorf("RequeueAll over two messages of which only previews were kept: %d, %v; want 0 and an error saying both stayed", n, err)
	}
}

// TestArchiveListsBoundedEntries: an entry archived whole that is larger
// than a listing reads (a 3 MiB message a broker with no bound rejected)
// is listed by its ID and size, without its body, and ArchivedEntry reads
// it whole, on request. Before, every page of the archive carried each
// entry whole, however large.
func TestArchiveListsBoundedEntries(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "errand-test-listbound-" + rand.Text()[:8]
	dropAll(t, rdb, prefix)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, MaxPayload: -1})
	defer b.Close()
	body := strings.Repeat("b", 3<<20)
	if err := b.Publish(ctx, driver.Message{ID: "big", Queue: "q", Body: []byte(body)},
		driver.Message{ID: "small", Queue: "q", Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Fetch(ctx, "q", 2, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("fetch: %d deliveries, %v", len(ds), err)
	}
	for _, d := range ds {
		if err := b.Reject(ctx, d, "failed for good"); err != nil {
			t.Fatal(err)
		}
	}
	es, err := b.Archived(ctx, "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("the archive lists %d entries; want 2", len(es))
	}
	for _, e := range es {
		switch e.ID {
		case "big":
			if len(e.Body) > redisbroker.ArchivePreview || e.Size < len(body) {
				t.Errorf("listing promise broken: a 3 MiB entry lists %d bytes of body and size %d; want at most ArchivePreview (%d) bytes and its size", len(e.Body), e.Size, redisbroker.ArchivePreview)
			}
		case "small":
			if string(e.Body) != "ok" || e.Size != 0 || e.Reason != "failed for good" {
				t.Errorf("a small entry lists body %q, size %d, reason %q; want it whole", e.Body, e.Size, e.Reason)
			}
		default:
			t.Errorf("unexpected entry %q", e.ID)
		}
	}
	e, err := b.ArchivedEntry(ctx, "q", "big")
	if err != nil || string(e.Body) != body || e.Size != 0 || e.Reason != "failed for good" {
		t.Errorf("ArchivedEntry of the 3 MiB entry: %d bytes, size %d, reason %q, %v; want it whole", len(e.Body), e.Size, e.Reason, err)
	}
}

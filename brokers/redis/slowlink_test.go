package redisbroker_test

// Issue 24, item 2: no script runs twice by accident, and a message too
// large to deliver is set aside by a bound that does not depend on the
// client's read timeout. Both on a real server, through a client whose
// link to it is slow (a dialer of the test's own): the commands reach
// Redis and run; only their replies are late.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// slowReadTimeout is the slow clients' read timeout: long enough for a
// script that sets 6 MiB aside on a loaded CI machine (200ms was not),
// far shorter than a 3 MiB reply takes on the oversized test's link.
const slowReadTimeout = 2 * time.Second

// slowClient is a client of the single-node server with go-redis's
// default retries (MaxRetries 3) and a read timeout of slowReadTimeout,
// on link.
func slowClient(t *testing.T, fast goredis.UniversalClient, link redistest.SlowLink) *goredis.Client {
	t.Helper()
	o := *fast.(*goredis.Client).Options()
	o.MaxRetries = 3
	o.ReadTimeout = slowReadTimeout
	o.Dialer = link.Dial
	o.OnConnect = nil
	c := goredis.NewClient(&o)
	t.Cleanup(func() { c.Close() })
	return c
}

// dropAll deletes every key of prefix, the queues' and the global ones.
func dropAll(t *testing.T, rdb goredis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, pat := range []string{"{" + prefix + ":*", "{" + prefix + "}:*"} {
			if keys, _ := rdb.Keys(ctx, pat).Result(); len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
		}
	})
}

// TestSlowFetchLeasesOnce: a fetch whose reply comes after the client's
// read timeout, on a client that retries (MaxRetries 3), leases one
// message, not four. Before, go-redis ran the fetch script again on each
// retry, and every earlier lease was orphaned until it ran out.
func TestSlowFetchLeasesOnce(t *testing.T) {
	fast := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "errand-test-slowfetch-" + rand.Text()[:8]
	dropAll(t, fast, prefix)
	producer := redisbroker.New(fast, &redisbroker.Options{Prefix: prefix})
	defer producer.Close()
	for i := range 5 {
		if err := producer.Publish(ctx, driver.Message{ID: fmt.Sprint("t", i), Queue: "q", Body: []byte("small")}); err != nil {
			t.Fatal(err)
		}
	}
	// The server has the fetch script cached (an EVALSHA answered NOSCRIPT
	// late would prove nothing), from a fetch on another queue.
	if err := producer.Publish(ctx, driver.Message{ID: "w", Queue: "warm", Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Fetch(ctx, "warm", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The fetch script names K:inflight; no other call of this test does.
	slow := slowClient(t, fast, redistest.SlowLink{Late: []byte("{" + prefix + ":q}:inflight")})
	consumer := redisbroker.New(slow, &redisbroker.Options{Prefix: prefix})
	defer consumer.Close()
	if _, err := consumer.Fetch(ctx, "q", 1, time.Minute); err == nil {
		t.Fatal("a fetch whose reply came after the read timeout returned no error; the test's slow link did not work")
	}
	st, err := producer.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.InFlight != 1 || st.Pending != 4 {
		t.Errorf("no-retry promise broken: one Fetch(limit 1) whose reply was late left %d messages in flight and %d pending; want 1 and 4 (go-redis must not run the fetch script again: every extra run orphans a lease)", st.InFlight, st.Pending)
	}
}

// TestOversizedMessageSetAside: a message larger than the consumer's
// MaxPayload that reached the queue anyway — 3 MiB of text pushed raw
// onto the list, and a 3 MiB body published through a broker without a
// bound — is set aside in the archive by the fetch script, with a reason
// naming its size and the bound, and the small message behind it is
// delivered. The entry keeps the body's size and its first ArchivePreview
// bytes (issue 31, item 5; TestHugeMessageSetAside). The link reads 512
// KiB/s with a 2s read timeout: a reply carrying 3 MiB (6s) could never be
// read in time, so before, the fetch failed again and again and the
// messages stayed in flight forever.
func TestOversizedMessageSetAside(t *testing.T) {
	fast := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "errand-test-oversized-" + rand.Text()[:8]
	dropAll(t, fast, prefix)
	const size = 3 << 20
	if err := fast.LPush(ctx, "{"+prefix+":q}:pending", strings.Repeat("r", size)).Err(); err != nil {
		t.Fatal(err)
	}
	unbounded := redisbroker.New(fast, &redisbroker.Options{Prefix: prefix, MaxPayload: -1})
	defer unbounded.Close()
	if err := unbounded.Publish(ctx,
		driver.Message{ID: "big", Queue: "q", Body: bytes.Repeat([]byte("b"), size)},
		driver.Message{ID: "small", Queue: "q", Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	slow := slowClient(t, fast, redistest.SlowLink{Rate: 512 << 10})
	consumer := redisbroker.New(slow, &redisbroker.Options{Prefix: prefix})
	defer consumer.Close()
	ds, err := consumer.Fetch(ctx, "q", 10, time.Minute)
	if err != nil {
		t.Fatalf("large-message promise broken: Fetch over a link that cannot carry a 3 MiB reply within the read timeout failed (%v); the fetch script must set oversized messages aside and return only small ones", err)
	}
	if len(ds) != 1 || ds[0].ID != "small" {
		ids := []string{}
		for _, d := range ds {
			ids = append(ids, fmt.Sprintf("%s (%d bytes)", d.ID, len(d.Body)))
		}
		t.Fatalf("large-message promise broken: Fetch delivered %v; want only the small message", ids)
	}
	st, err := unbounded.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 2 || st.InFlight != 1 || st.Pending != 0 {
		t.Errorf("large-message promise broken: after the fetch the queue counts %d archived, %d in flight, %d pending; want 2 archived (the oversized), 1 in flight (the small), 0 pending", st.Dead, st.InFlight, st.Pending)
	}
	es, err := unbounded.Archived(ctx, "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d bytes is over the broker's MaxPayload of %d bytes", size, redisbroker.DefaultMaxPayload)
	for _, e := range es {
		if !strings.Contains(e.Reason, want) || e.Size != size || len(e.Body) != redisbroker.ArchivePreview {
			t.Errorf("large-message promise broken: archive entry %q has reason %q, size %d and a body of %d bytes; want a reason saying %q, the size %d and its first %d bytes (ArchivePreview)",
				e.ID, e.Reason, e.Size, len(e.Body), want, size, redisbroker.ArchivePreview)
		}
	}
}

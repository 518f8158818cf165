package redisbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// namedClient returns a client of its own to the deployment name names
// ("Single" or "Cluster", as servers), honouring ctx deadlines as Open's
// clients do (ContextTimeoutEnabled), whose connections carry a client
// name of their own, so a test can find them in CLIENT LIST. readTimeout
// is its ReadTimeout (0: go-redis's default).
func namedClient(t *testing.T, name string, readTimeout time.Duration) (goredis.UniversalClient, string) {
	t.Helper()
	cname := "errand-waitfetch-" + rand.Text()[:8]
	var rdb goredis.UniversalClient
	switch name {
	case "Single":
		o := redistest.URLOptions(t)
		o.ClientName, o.ContextTimeoutEnabled, o.ReadTimeout = cname, true, readTimeout
		rdb = goredis.NewClient(o)
	case "Cluster":
		if os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS") == "" {
			conformance.ServiceUnavailable(t, "ERRAND_REDIS_CLUSTER_ADDRS is not set (scripts/services start exports it)")
		}
		rdb = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS"), ","),
			ClientName: cname, ContextTimeoutEnabled: true, ReadTimeout: readTimeout})
	default:
		t.Fatalf("unknown deployment %q", name)
	}
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(t, name+" Redis unreachable: "+err.Error())
	}
	return rdb, cname
}

// nodeOf returns the client of the node holding key.
func nodeOf(ctx context.Context, t *testing.T, rdb goredis.UniversalClient, key string) *goredis.Client {
	t.Helper()
	switch c := rdb.(type) {
	case *goredis.Client:
		return c
	case *goredis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("client %T", rdb)
	return nil
}

// awaitBlocked returns once a connection named cname is blocked on node
// (CLIENT LIST flag b), failing t after a deadline.
func awaitBlocked(ctx context.Context, t *testing.T, node *goredis.Client, cname string) {
	t.Helper()
	deadline := time.Now().Add(scaled(10 * time.Second))
	for {
		list, err := node.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if !strings.Contains(line, " name="+cname+" ") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "b") {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %s blocked on %s within the deadline: the idle Fetch never reached its BLPOP", cname, node.Options().Addr)
		}
		time.Sleep(5 * time.Millisecond) // polling CLIENT LIST, not waiting for time to pass
	}
}

// TestWaitFetch: an idle Fetch blocks, and a publish hands it the message
// in the wake-up's own round trip (the fetch script is pipelined behind
// the BLPOP); a Fetch whose ctx deadline ends while it is blocked leases
// nothing (the connection is dropped, and Redis frees the blocked client
// with the queued script unrun), so the message published next goes at
// once to the next fetcher, not after a lease, and so does a Fetch whose
// client's read times out while Redis still waits; a Fetch cancelled while
// blocked either returns the message it took or leaves it to the next
// fetcher at once.
func TestWaitFetch(t *testing.T) {
	for _, name := range []string{"Single", "Cluster"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), scaled(time.Minute))
			defer cancel()
			rdb, cname := namedClient(t, name, 0)
			prefix := freshPrefix(t, rdb)
			// MaxBlock well beyond the ctx deadlines below: only a dropped
			// connection, a publish or a cancelled read ends a wait early.
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, MaxBlock: 2 * time.Second})
			other, _ := namedClient(t, name, 0)
			pub := redisbroker.New(other, &redisbroker.Options{Prefix: prefix})
			const q, lease = "w", time.Hour // a message leased and dropped would not come back within the test
			node := nodeOf(ctx, t, rdb, "{"+prefix+":"+q+"}:notify")
			publish := func(id string) {
				t.Helper()
				if err := pub.Publish(ctx, driver.Message{ID: id, Queue: q, Body: []byte(id)}); err != nil {
					t.Fatal(err)
				}
			}
			type fetched struct {
				ds  []*driver.Delivery
				err error
			}
			fetchAsync := func(fctx context.Context) <-chan fetched {
				ch := make(chan fetched, 1)
				go func() {
					ds, err := b.Fetch(fctx, q, 1, lease)
					ch <- fetched{ds, err}
				}()
				return ch
			}
			one := func(what string, f fetched, id string) {
				t.Helper()
				if f.err != nil || len(f.ds) != 1 || f.ds[0].ID != id {
					t.Fatalf("%s: %d deliveries, %v; want message %s", what, len(f.ds), f.err, id)
				}
				if err := ackOne(ctx, b, f.ds[0]); err != nil {
					t.Fatal(err)
				}
			}

			// Warm up: the scripts are cached, the queue registered.
			publish("warm")
			ds, err := b.Fetch(ctx, q, 1, lease)
			one("warm-up fetch", fetched{ds, err}, "warm")

			// 1. The handover: blocked, then woken by a publish.
			got := fetchAsync(ctx)
			awaitBlocked(ctx, t, node, cname)
			publish("m1")
			one("a blocked Fetch woken by a publish", <-got, "m1")

			// 2. The ctx deadline ends the wait: nothing leased.
			dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			got = fetchAsync(dctx)
			awaitBlocked(ctx, t, node, cname)
			f := <-got
			dcancel()
			if !errors.Is(f.err, context.DeadlineExceeded) || len(f.ds) != 0 {
				t.Fatalf("a blocked Fetch past its ctx deadline: %d deliveries, %v; want none and context.DeadlineExceeded", len(f.ds), f.err)
			}
			publish("m2")
			ds, err = b.Fetch(ctx, q, 1, lease)
			one("the Fetch after one that gave up at its deadline (the given-up fetch must not have leased it: its lease is an hour)", fetched{ds, err}, "m2")

			// 2b. The client's read gives up while the server still
			// waits (a ReadTimeout shorter than the block): the connection
			// is dropped, and Redis frees the blocked client with the
			// queued script unrun.
			short, sname := namedClient(t, name, 200*time.Millisecond)
			sb := redisbroker.New(short, &redisbroker.Options{Prefix: prefix, MaxBlock: 2 * time.Second})
			sgot := make(chan fetched, 1)
			go func() {
				ds, err := sb.Fetch(ctx, q, 1, lease)
				sgot <- fetched{ds, err}
			}()
			awaitBlocked(ctx, t, node, sname)
			if f := <-sgot; f.err == nil || len(f.ds) != 0 {
				t.Fatalf("a blocked Fetch whose client's read timed out: %d deliveries, %v; want none and an error", len(f.ds), f.err)
			}
			publish("m2b")
			ds, err = b.Fetch(ctx, q, 1, lease)
			one("the Fetch after one whose read timed out (which must not have leased it: its lease is an hour)", fetched{ds, err}, "m2b")

			// 3. Cancelled while blocked, then a publish: the message is
			// either the cancelled Fetch's, or the next fetcher's at once.
			cctx, ccancel := context.WithCancel(ctx)
			got = fetchAsync(cctx)
			awaitBlocked(ctx, t, node, cname)
			ccancel()
			publish("m3")
			f = <-got
			switch {
			case f.err == nil:
				one("a Fetch cancelled while blocked that took the message", f, "m3")
			case errors.Is(f.err, context.Canceled) && len(f.ds) == 0:
				ds, err = b.Fetch(ctx, q, 1, lease)
				one("the Fetch after one cancelled while blocked (which must not have leased it: its lease is an hour)", fetched{ds, err}, "m3")
			default:
				t.Fatalf("a Fetch cancelled while blocked: %d deliveries, %v; want the message, or none and context.Canceled", len(f.ds), f.err)
			}
			st, err := b.Stats(ctx, q)
			if err != nil || st.Pending != 0 || st.InFlight != 0 {
				t.Fatalf("after every message was acked: %+v, %v; want nothing pending or in flight", st, err)
			}
		})
	}
}

// TestWaitFetchRoundTrips: once an idle Fetch is blocked, the message a
// publish wakes it for reaches it with no further command: the fetch
// script queued behind the BLPOP is the handover.
func TestWaitFetchRoundTrips(t *testing.T) {
	for _, name := range []string{"Single", "Cluster"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), scaled(time.Minute))
			defer cancel()
			rdb, cname := namedClient(t, name, 0)
			c := &tripCounter{perNode: map[string]int{}}
			rdb.AddHook(c)
			prefix := freshPrefix(t, rdb)
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, MaxBlock: 5 * time.Second})
			other, _ := namedClient(t, name, 0)
			pub := redisbroker.New(other, &redisbroker.Options{Prefix: prefix})
			const q = "r"
			node := nodeOf(ctx, t, rdb, "{"+prefix+":"+q+"}:notify")
			for _, id := range []string{"warm", "m"} { // warm: the scripts cached
				type fetched struct {
					ds  []*driver.Delivery
					err error
				}
				got := make(chan fetched, 1)
				go func() {
					ds, err := b.Fetch(ctx, q, 1, time.Minute)
					got <- fetched{ds, err}
				}()
				awaitBlocked(ctx, t, node, cname)
				c.reset()
				if err := pub.Publish(ctx, driver.Message{ID: id, Queue: q, Body: []byte(id)}); err != nil {
					t.Fatal(err)
				}
				f := <-got
				if f.err != nil || len(f.ds) != 1 || f.ds[0].ID != id {
					t.Fatalf("a blocked Fetch woken by the publish of %s: %d deliveries, %v; want it", id, len(f.ds), f.err)
				}
				if n := c.pipes.Load() + c.singles.Load(); id == "m" && n != 0 {
					t.Errorf("round-trip promise broken: the blocked Fetch sent %d more commands or pipelines after the publish woke it; want none (the fetch script queued behind the BLPOP hands the message over)", n)
				}
				if err := ackOne(ctx, b, f.ds[0]); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// scaled multiplies d by ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1).
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("ERRAND_CONFORMANCE_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

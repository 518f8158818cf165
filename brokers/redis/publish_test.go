package redisbroker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// TestPublishWakeListBounded: publishes with no fetcher waiting leave a
// bounded wake-up list (K:notify), whichever shape the publish takes (on
// one node the transaction trims the list only once it is over its
// bound), and every message is queued once, in order.
func TestPublishWakeListBounded(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := freshPrefix(t, rdb)
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			defer b.Close()
			notify := "{" + prefix + ":q}:notify"
			const n = 700
			longest := int64(0)
			for i := range n {
				if err := b.Publish(ctx, driver.Message{ID: fmt.Sprint("m", i), Queue: "q", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				longest = max(longest, rdb.LLen(ctx, notify).Val())
			}
			// 256 kept, plus at most one publish's tokens before the trim.
			if longest > 256+64 {
				t.Errorf("wake-up promise broken: K:notify grew to %d tokens over %d publishes with no fetcher; want it bounded near 256", longest, n)
			}
			if st, err := b.Stats(ctx, "q"); err != nil || st.Pending != n {
				t.Fatalf("Stats = %+v, %v; want %d pending", st, err, n)
			}
			for i := range 3 {
				if d := fetchOne(ctx, t, b, "q"); d.ID != fmt.Sprint("m", i) {
					t.Fatalf("fetched %s; want m%d (FIFO)", d.ID, i)
				}
			}
		})
	}
}

// TestPublishRelistsAfterOtherBroker: a queue this broker listed, which
// another broker's Queues took out of the set for being empty, is listed
// again by this broker's next publish (the transaction lists a queue
// once per Broker, then relies on K:unlisted).
func TestPublishRelistsAfterOtherBroker(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := freshPrefix(t, rdb)
			producer := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMax: -1})
			defer producer.Close()
			operator := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMax: -1})
			defer operator.Close()
			listed := func() bool {
				t.Helper()
				qs, err := operator.Queues(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Contains(qs, "q")
			}
			for round := range 3 {
				if err := producer.Publish(ctx, driver.Message{ID: fmt.Sprint("m", round), Queue: "q", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				if !listed() {
					t.Fatalf("queue-set promise broken: round %d, queue q with a message pending is not listed", round)
				}
				d := fetchOne(ctx, t, operator, "q")
				if errs := operator.Ack(ctx, []*driver.Delivery{d}); errs[0] != nil {
					t.Fatal(errs[0])
				}
				if listed() {
					t.Fatalf("queue-set promise broken: round %d, queue q of which nothing remains is still listed", round)
				}
			}
		})
	}
}

// names records the commands of each pipeline or transaction a client
// sends (go-redis's hook sees a transaction with its MULTI and EXEC).
type names struct {
	mu    sync.Mutex
	calls [][]string
}

func (n *names) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (n *names) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (n *names) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		var call []string
		for _, c := range cmds {
			call = append(call, c.Name())
		}
		n.mu.Lock()
		n.calls = append(n.calls, call)
		n.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (n *names) take() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.calls
	n.calls = nil
	return c
}

// TestPublishShapes: on one node a publish of messages due now at
// priority 0, to one queue or several, is one transaction of plain
// commands (no script, no second round trip); one holding a delayed or
// prioritised message is one pipeline of the publish script; every
// message is then delivered in its order (priority first, FIFO within).
func TestPublishShapes(t *testing.T) {
	servers(t)
	o, _ := goredis.ParseURL(os.Getenv("ERRAND_REDIS_URL"))
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	var n names
	rdb.AddHook(&n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: freshPrefix(t, rdb)})
	defer b.Close()
	b.Publish(ctx, driver.Message{ID: "warm", Queue: "w", Body: []byte("w"), Priority: 1}) // caches the script
	n.take()

	shape := func(what string, want string, msgs ...driver.Message) {
		t.Helper()
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		calls := n.take()
		if len(calls) != 1 {
			t.Fatalf("round-trip promise broken: a publish of %s sent %d pipelines %v; want one", what, len(calls), calls)
		}
		got := "pipeline"
		if calls[0][0] == "multi" {
			got = "transaction"
		}
		if got != want || slices.Contains(calls[0], "evalsha") != (want == "pipeline") {
			t.Fatalf("publish shape: %s went as %v; want a %s", what, calls[0], want)
		}
	}
	shape("one message due now", "transaction", driver.Message{ID: "a1", Queue: "a", Body: []byte("1")})
	shape("two queues' messages due now", "transaction",
		driver.Message{ID: "a2", Queue: "a", Body: []byte("2")}, driver.Message{ID: "b1", Queue: "b", Body: []byte("1")},
		driver.Message{ID: "a3", Queue: "a", Body: []byte("3")})
	shape("a prioritised message", "pipeline",
		driver.Message{ID: "a4", Queue: "a", Body: []byte("4")}, driver.Message{ID: "a5", Queue: "a", Body: []byte("5"), Priority: 9})
	shape("a delayed message", "pipeline",
		driver.Message{ID: "a6", Queue: "a", Body: []byte("6"), NotBefore: time.Now().Add(-time.Second)})

	for _, id := range []string{"a1", "a3", "a5", "a6"} {
		if l, st, ok, err := b.Find(ctx, "a", id); err != nil || !ok || l.ID != id || st != driver.ListPending {
			t.Fatalf("find promise broken: Find(%s) = %+v, %q, %v, %v; want it pending (Find's index written by both shapes)", id, l, st, ok, err)
		}
	}
	for _, want := range []string{"a5", "a1", "a2", "a3", "a4", "a6"} {
		if d := fetchOne(ctx, t, b, "a"); d.ID != want {
			t.Fatalf("fetched %s; want %s (priority first, then FIFO across both shapes)", d.ID, want)
		}
	}
	if d := fetchOne(ctx, t, b, "b"); d.ID != "b1" {
		t.Fatalf("fetched %s from b; want b1", d.ID)
	}
	qs, err := b.Queues(ctx)
	if err != nil || !slices.Contains(qs, "a") || !slices.Contains(qs, "b") {
		t.Fatalf("queue-set promise broken: Queues = %v, %v; want a and b listed", qs, err)
	}
}

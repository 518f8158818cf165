package redisbroker_test

// The queue set P:queues heals within one publish or fetch of any process
// whatever emptied it, and Server.Queue answers a used queue's counts
// however long it was idle (issue 31, items 2 and 3).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestQueueSetHeals: a producer, a worker and an operator keep running
// while a private redis-server loses everything (a FLUSHDB; a restart
// without persistence), after the operator has listed the queues. The
// producer's next publish lists its queue again, with its thousands of
// tasks, and it stays listed once the worker has drained them; a queue
// fed by another program (an LPUSH onto its pending list) is listed again
// by the worker's next fetch. Server.Queue answers both queues' counts
// throughout.
func TestQueueSetHeals(t *testing.T) {
	for _, loss := range []string{"FLUSHDB", "RestartWithoutPersistence"} {
		t.Run(loss, func(t *testing.T) {
			t.Parallel()
			addr, server := redistest.PrivateServer(t)
			rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: 3})
			t.Cleanup(func() { rdb.Close() })
			lose := func(t *testing.T) {
				t.Helper()
				if loss == "FLUSHDB" {
					if err := rdb.FlushDB(context.Background()).Err(); err != nil {
						t.Fatal(err)
					}
					return
				}
				server.Kill(t)
				server.Start(t) // empty: no RDB, no AOF
			}
			queueSetHeals(t, rdb, lose)
		})
	}
}

func queueSetHeals(t *testing.T, rdb *goredis.Client, lose func(*testing.T)) {
	ctx, cancel := context.WithTimeout(context.Background(), scaled(2*time.Minute))
	defer cancel()
	const prefix = "errand-heal"
	producer := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	worker := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	operator := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	for _, b := range []*redisbroker.Broker{producer, worker, operator} {
		defer b.Close()
	}
	be := conformance.MemoryBackend().New(t, 0)
	srv, err := errand.NewServer(errand.Config{Broker: operator, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	const q, foreign = "q", "f"
	listed := func(when string, want ...string) {
		t.Helper()
		qs, err := operator.Queues(ctx)
		if err != nil {
			t.Fatalf("Queues %s: %v", when, err)
		}
		for _, w := range want {
			if !slices.Contains(qs, w) {
				t.Errorf("queue-set promise broken: %s, Queues = %v; want %s listed (the set heals within one publish or fetch of any process)", when, qs, w)
			}
		}
	}
	counts := func(when, queue string, want func(driver.QueueStats) bool, what string) {
		t.Helper()
		qi, err := srv.Queue(ctx, queue)
		if err != nil {
			t.Errorf("queue-set promise broken: %s, Server.Queue(%s): %v; want its counts", when, queue, err)
			return
		}
		if !want(qi.Stats) {
			t.Errorf("%s, Server.Queue(%s).Stats = %+v; want %s", when, queue, qi.Stats, what)
		}
	}
	publish := func(n int) {
		t.Helper()
		for i := 0; i < n; i += 100 {
			batch := make([]driver.Message, 0, 100)
			for j := i; j < min(i+100, n); j++ {
				batch = append(batch, driver.Message{ID: fmt.Sprint("m", j), Queue: q, Body: []byte("x")})
			}
			if err := producer.Publish(ctx, batch...); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain := func(queue string, n int) {
		t.Helper()
		for got := 0; got < n; {
			ds, err := worker.Fetch(ctx, queue, 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range worker.Ack(ctx, ds) {
				if err != nil {
					t.Fatal(err)
				}
			}
			got += len(ds)
		}
	}
	pushForeign := func(n int) {
		t.Helper()
		for i := range n {
			if err := rdb.LPush(ctx, "{"+prefix+":"+foreign+"}:pending", fmt.Sprint("foreign ", i)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Before the loss: every process has used its queues, and the
	// operator has read them.
	publish(1)
	drain(q, 1)
	pushForeign(1)
	drain(foreign, 1)
	listed("before the loss", q, foreign)
	counts("before the loss", q, func(s driver.QueueStats) bool { return s.Completed == 1 }, "Completed 1")

	lose(t)

	const n = 2000
	publish(n)
	listed("after the loss and a publish of its tasks", q)
	counts("after the loss and a publish", q, func(s driver.QueueStats) bool { return s.Pending == n }, fmt.Sprint("Pending ", n))
	drain(q, n)
	listed("after the loss, once the worker drained the queue", q)
	counts("after the loss, once drained", q, func(s driver.QueueStats) bool { return s.Pending == 0 && s.Completed == n },
		fmt.Sprintf("Pending 0, Completed %d", n))

	pushForeign(3)
	ds, err := worker.Fetch(ctx, foreign, 1, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch of the foreign queue: %d deliveries, %v; want 1", len(ds), err)
	}
	listed("after the loss and a worker's fetch of a queue another program fills", foreign)
	counts("after the loss and a fetch", foreign, func(s driver.QueueStats) bool { return s.Pending == 2 && s.InFlight == 1 }, "Pending 2, InFlight 1")
}

// TestIdleQueueKnown: a queue whose last completed message is older than
// CompletedMaxAge leaves Queues' listing, but Server.Queue still answers
// its counts (a monitoring loop polling its depth does not start failing
// because it was quiet); a name never used is ErrUnknownQueue.
func TestIdleQueueKnown(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx, cancel := context.WithTimeout(context.Background(), scaled(time.Minute))
		defer cancel()
		prefix := freshPrefix(t, rdb)
		b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMaxAge: time.Millisecond})
		defer b.Close()
		srv, err := errand.NewServer(errand.Config{Broker: b, Backend: conformance.MemoryBackend().New(t, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, driver.Message{ID: "m", Queue: "idle", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := ackOne(ctx, b, fetchOne(ctx, t, b, "idle")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(scaled(10 * time.Second))
		for {
			qs, err := b.Queues(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(qs, "idle") {
				break // unlisted: its completed message is older than CompletedMaxAge
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue idle, its one completed message older than CompletedMaxAge (1ms), is still listed after 10s")
			}
			time.Sleep(10 * time.Millisecond) // poll: the entry ages by the server's clock
		}
		qi, err := srv.Queue(ctx, "idle")
		if err != nil {
			t.Fatalf("known-queue promise broken: Server.Queue of a queue used and idle for CompletedMaxAge: %v; want its counts", err)
		}
		if qi.Stats.Completed != 1 || qi.Stats.Pending != 0 {
			t.Errorf("Server.Queue(idle).Stats = %+v; want Completed 1, nothing pending", qi.Stats)
		}
		if _, err := srv.Queue(ctx, "never-used"); !errors.Is(err, errand.ErrUnknownQueue) {
			t.Errorf("known-queue promise broken: Server.Queue of a name never used returned %v; want ErrUnknownQueue", err)
		}
		// A publish lists it again (the mark left by Queues stays harmless).
		if err := b.Publish(ctx, driver.Message{ID: "m2", Queue: "idle", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if qs, err := b.Queues(ctx); err != nil || !slices.Contains(qs, "idle") {
			t.Errorf("queue-set promise broken: after a new publish Queues = %v, %v; want idle listed", qs, err)
		}
	})
}

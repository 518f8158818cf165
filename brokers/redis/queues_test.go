package redisbroker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

// TestWeightedQueues is issue 12's "done when" on real Redis servers: a
// worker on two queues weighted 3:1 under a full backlog (400 tasks on
// each) with Concurrency 4 starts the first 400 tasks within ±10 % of 3:1.
func TestWeightedQueues(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) { weightedQueues(t, rdb) })
	}
}

func weightedQueues(t *testing.T, rdb goredis.UniversalClient) {
	const n = 400
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := conformance.MemoryBackend().New(t, 0)
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started []string
	full := make(chan struct{})
	srv.Register("tag", func(q string) error {
		mu.Lock()
		defer mu.Unlock()
		if started = append(started, q); len(started) == n {
			close(full)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The backlog, in batches: every task on its queue before the worker starts.
	for _, q := range []string{"low", "high"} {
		var batch []errand.Message
		for range n {
			sig := errand.NewSignature("tag", q)
			sig.RoutingKey = q
			body, err := errand.EncodeSignature(sig)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, errand.Message{ID: sig.UUID, Queue: q, Body: body})
		}
		if err := srv.Broker().Publish(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{"high": 3, "low": 1}, Concurrency: 4, PausePoll: -1, Heartbeat: -1})
	begin := time.Now()
	w.Start()
	select {
	case <-full:
	case <-ctx.Done():
		t.Fatalf("the worker did not start %d tasks in time", n)
	}
	took := time.Since(begin)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := w.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	hi, lo := 0, 0
	for _, q := range started[:n] {
		if q == "high" {
			hi++
		} else {
			lo++
		}
	}
	ratio := float64(hi) / float64(max(lo, 1))
	t.Logf("first %d tasks started: %d high, %d low (ratio %.3f) in %v", n, hi, lo, ratio, took)
	if lo == 0 || ratio < 2.7 || ratio > 3.3 {
		t.Errorf("queue weights promise broken: of the first %d tasks started under a backlog on both queues weighted 3:1, %d were high and %d low: ratio %.3f, want 3 ± 10%%", n, hi, lo, ratio)
	}
}

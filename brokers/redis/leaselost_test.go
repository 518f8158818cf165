package redisbroker_test

// Issue 24, item 3: a lease lost during a Redis outage cancels the running
// task's ctx with errand.ErrLeaseLost, and the first run's late outcome
// never overwrites the run that replaced it. On a private redis-server
// paused with CLIENT PAUSE (pausable, pause_test.go).

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestPauseLongerThanLeaseCancelsHandler: 50 tasks run on worker A with a
// 2s lease; Redis is paused for 5s. Every first run sees its ctx cancelled
// with a cause satisfying errors.Is(cause, errand.ErrLeaseLost), and
// returns at once with a result of its own; worker B runs each task again
// once Redis answers. Every task ends with the second run's result: no
// first run's outcome is recorded.
func TestPauseLongerThanLeaseCancelsHandler(t *testing.T) {
	addr := pausable(t)
	const n = 50
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	be := memorybackend.New(nil) // only the broker is paused: a late write would land
	t.Cleanup(func() { be.Close() })
	queue := "leaselost-" + rand.Text()

	var mu sync.Mutex
	runs := map[string]int{}
	lostCause := map[string]error{}
	started := make(chan struct{}, n)
	work := func(ctx context.Context) (string, error) {
		ti, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		runs[ti.UUID]++
		run := runs[ti.UUID]
		mu.Unlock()
		if run > 1 {
			return "second", nil
		}
		started <- struct{}{}
		<-ctx.Done()
		mu.Lock()
		lostCause[ti.UUID] = context.Cause(ctx)
		mu.Unlock()
		return "first", nil // a late success: must not be recorded
	}
	newServer := func() *errand.Server {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		srv, err := errand.NewServer(errand.Config{Broker: redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-leaselost"}), Backend: be, DefaultQueue: queue})
		if err != nil {
			t.Fatal(err)
		}
		srv.Register("work", work)
		return srv
	}
	a, b := newServer(), newServer()
	var rs []*errand.AsyncResult
	for range n {
		r, err := a.SendTask(ctx, errand.NewSignature("work"))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	cfg := errand.WorkerConfig{Concurrency: n, Lease: 2 * time.Second, ExtendEvery: 660 * time.Millisecond}
	wa := a.NewWorker(cfg)
	wa.Start()
	for range n {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("worker A never started every task")
		}
	}
	ctl := goredis.NewClient(&goredis.Options{Addr: addr})
	defer ctl.Close()
	if err := ctl.Do(ctx, "CLIENT", "PAUSE", 5000, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	wb := b.NewWorker(cfg) // fetches once Redis answers again
	wb.Start()
	for _, r := range rs {
		var out string
		if err := r.GetInto(ctx, &out); err != nil || out != "second" {
			t.Errorf("lost lease promise broken: task %s ended %q, %v; want the second run's result (the first run's lease was lost)", r.Signature.UUID, out, err)
		}
	}
	for _, w := range []*errand.Worker{wa, wb} {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := w.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	told, twice := 0, 0
	for _, r := range rs {
		id := r.Signature.UUID
		if errors.Is(lostCause[id], errand.ErrLeaseLost) {
			told++
		} else {
			t.Errorf("lost lease promise broken: task %s's first run ended with ctx cause %v; want errand.ErrLeaseLost", id, lostCause[id])
		}
		if runs[id] == 2 {
			twice++
		} else {
			t.Errorf("task %s ran %d times; want twice (the pause outlasted its lease)", id, runs[id])
		}
		if st, err := be.GetState(ctx, id); err != nil || st.State != errand.StateSuccess {
			t.Errorf("task %s: state %+v, %v", id, st, err)
		}
	}
	t.Logf("pause 5s > lease 2s: %d of %d first runs told (ctx cause ErrLeaseLost), %d of %d ran twice, every result the second run's", told, n, twice, n)
}

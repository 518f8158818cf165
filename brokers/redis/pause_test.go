package redisbroker_test

// Issue 15, item 9: lease extension under a paused Redis (CLIENT PAUSE, as
// a failover, a slow fork or an overloaded server looks to clients). Run on
// a private redis-server: CLIENT PAUSE stops every client of a server, and
// the shared test server carries other tests' timing-sensitive cases.

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
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// pausable starts a private redis-server and returns its address.
func pausable(t *testing.T) string {
	addr, _ := redistest.PrivateServer(t)
	return addr
}

// pauseRun is one run of the scenario: n tasks running on worker A, a
// worker B waiting on the same queue, and Redis paused for pause from
// pauseAt after the first task started. Each task works until holdFor
// after that start.
type pauseRun struct {
	lease, extendEvery      time.Duration
	pauseAt, pause, holdFor time.Duration
	n                       int
}

type pauseResult struct {
	runs      map[string]int // task UUID -> how many times its function ran
	leaseLost int            // ErrLeaseLost reports of worker A
	reports   []error        // everything worker A reported
}

func (p pauseRun) run(t *testing.T, addr string) pauseResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	be := memorybackend.New(nil) // only the broker is paused
	t.Cleanup(func() { be.Close() })
	queue := "pause-" + rand.Text()

	var mu sync.Mutex
	res := pauseResult{runs: map[string]int{}}
	started := make(chan struct{}, p.n)
	var holdUntil time.Time
	var first sync.Once
	work := func(ctx context.Context) error {
		ti, _ := errand.TaskInfoFrom(ctx)
		first.Do(func() { holdUntil = time.Now().Add(p.holdFor) })
		mu.Lock()
		res.runs[ti.UUID]++
		until := holdUntil
		mu.Unlock()
		started <- struct{}{}
		select {
		case <-time.After(time.Until(until)): // the task's own work
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	newServer := func() *errand.Server {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		srv, err := errand.NewServer(errand.Config{Broker: redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-pause"}), Backend: be, DefaultQueue: queue})
		if err != nil {
			t.Fatal(err)
		}
		srv.Register("work", work)
		return srv
	}
	a, b := newServer(), newServer()
	var rs []*errand.AsyncResult
	for range p.n {
		r, err := a.SendTask(ctx, errand.NewSignature("work"))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	cfg := errand.WorkerConfig{Concurrency: p.n, Lease: p.lease, ExtendEvery: p.extendEvery}
	wcfg := cfg
	wcfg.ErrorHandler = func(err error) {
		mu.Lock()
		defer mu.Unlock()
		res.reports = append(res.reports, err)
		if errors.Is(err, driver.ErrLeaseLost) {
			res.leaseLost++
		}
	}
	wa := a.NewWorker(wcfg)
	wa.Start()
	for range p.n {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("worker A never started every task")
		}
	}
	mu.Lock()
	pauseAt := holdUntil.Add(p.pauseAt - p.holdFor)
	mu.Unlock()
	wb := b.NewWorker(cfg) // B waits on the queue: it gets any task whose lease lapses
	wb.Start()

	ctl := goredis.NewClient(&goredis.Options{Addr: addr})
	defer ctl.Close()
	timer := time.NewTimer(time.Until(pauseAt)) // time passing is the event
	<-timer.C
	if err := ctl.Do(ctx, "CLIENT", "PAUSE", p.pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("task %s: %v", r.Signature.UUID, err)
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
	return res
}

// TestPauseShorterThanLease: 5 tasks with a 4s lease renewed every 2.2s;
// Redis is paused for 2.65s starting 1s into them. The renewal due at 2.2s
// times out at 3.3s, inside the pause; retried at once, the next try is
// answered when the pause ends (3.65s), before the lease runs out (4s).
// Worker B, waiting on the queue, receives nothing: every task runs once.
// Before the fix (renewals only at the next tick, 4.4s), all 5 ran twice.
func TestPauseShorterThanLease(t *testing.T) {
	addr := pausable(t)
	res := pauseRun{lease: 4 * time.Second, extendEvery: 2200 * time.Millisecond,
		pauseAt: time.Second, pause: 2650 * time.Millisecond, holdFor: 6 * time.Second, n: 5}.run(t, addr)
	dup := 0
	for _, n := range res.runs {
		if n > 1 {
			dup++
		}
	}
	if dup > 0 {
		t.Fatalf("lease promise broken: a %v pause, shorter than the %v lease, made %d of %d tasks run twice (runs %v); a failed extend must be retried within the lease (reports: %v)",
			2650*time.Millisecond, 4*time.Second, dup, len(res.runs), res.runs, res.reports)
	}
	if res.leaseLost > 0 {
		t.Errorf("lease promise broken: %d lease-lost reports for an outage shorter than the lease", res.leaseLost)
	}
}

// TestPauseLongerThanLease documents the other side: a pause of 3s with a
// 2s lease outlasts every lease. When Redis comes back, worker B's fetch
// finds the leases expired and takes the tasks — at-least-once, so each
// may run twice (the duplicate window is the outage minus what was left of
// the lease). Worker A gives each task up at its first ErrLeaseLost and
// reports that once per task, not on every tick.
func TestPauseLongerThanLease(t *testing.T) {
	addr := pausable(t)
	const n = 5
	res := pauseRun{lease: 2 * time.Second, extendEvery: 660 * time.Millisecond,
		pauseAt: 500 * time.Millisecond, pause: 3 * time.Second, holdFor: 5 * time.Second, n: n}.run(t, addr)
	if len(res.runs) != n {
		t.Fatalf("at-least-once promise broken: %d of %d tasks ran", len(res.runs), n)
	}
	// Each task's extender reports the loss once; its ack (after the task)
	// meets the lost lease once more.
	if res.leaseLost > 2*n {
		t.Errorf("lease promise broken: %d lease-lost reports for %d tasks, want at most one by the extender and one by the ack per task (the loss is reported once, not every tick): %v", res.leaseLost, n, res.reports)
	}
	t.Logf("pause 3s > lease 2s: runs per task %v, %d lease-lost reports", res.runs, res.leaseLost)
}

package conformance

// Issue 24: what a worker keeps when it stops waiting for a task — at
// shutdown (the settle grace) and when it loses the task's lease.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// shutdownKeepsLate: a worker shut down with a short deadline while three
// tasks run, one of which ignores its ctx. Shutdown returns by its
// deadline (before the test lets that task return) with a
// *errand.ShutdownError naming it; the two that honour their ctx are
// released and another worker finishes them; the latecomer's result is
// recorded and its message acked within the settle grace, and it never
// runs again.
func shutdownKeepsLate(t testing.TB, p workerPair) {
	const promise = "shutdown settle grace (a task returning after Shutdown's deadline is still recorded and acked; the unfinished are released)"
	c := newWCase(t, p)
	const n = 3 // task 0 ignores its ctx
	var mu sync.Mutex
	runs := map[int]int{}
	started := make(chan int, 2*n)
	release := make(chan struct{})
	c.register("late", func(ctx context.Context, i int) (string, error) {
		mu.Lock()
		runs[i]++
		run := runs[i]
		mu.Unlock()
		if run > 1 {
			return fmt.Sprint("again ", i), nil
		}
		started <- i
		if i == 0 {
			<-release
			return "late 0", nil
		}
		<-ctx.Done()
		return "", ctx.Err()
	})
	w1 := c.srv.NewWorker(errand.WorkerConfig{Concurrency: n, Lease: c.lease, SettleGrace: c.tm.Prompt * 20})
	w1.Start()
	var rs []*errand.AsyncResult
	for i := range n {
		rs = append(rs, c.send(errand.NewSignature("late", i)))
	}
	for range n {
		select {
		case <-started:
		case <-c.ctx.Done():
			t.Fatalf("%s: the tasks never started", promise)
		}
	}
	sctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt/10)
	defer cancel()
	err := w1.Shutdown(sctx)
	// Task 0 is still blocked on release: Shutdown returned without it.
	var se *errand.ShutdownError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		close(release)
		t.Fatalf("%s promise broken: Shutdown past its deadline, a task still running, returned %v; want an *errand.ShutdownError satisfying errors.Is(err, context.DeadlineExceeded)", promise, err)
	}
	if !slices.ContainsFunc(se.Running, func(rt errand.RunningTask) bool { return rt.UUID == rs[0].Signature.UUID }) {
		t.Errorf("%s promise broken: ShutdownError.Running = %+v does not name task %s, still running", promise, se.Running, rs[0].Signature.UUID)
	}
	close(release)
	var out string
	if err := rs[0].GetInto(c.ctx, &out); err != nil || out != "late 0" {
		t.Fatalf("%s promise broken: the task that returned after Shutdown's deadline ended %q, %v; want its result \"late 0\" recorded", promise, out, err)
	}
	sctx2, cancel2 := context.WithTimeout(c.ctx, c.tm.Prompt*10)
	defer cancel2()
	if err := w1.Shutdown(sctx2); err != nil {
		t.Errorf("%s promise broken: Shutdown again, once every task returned, = %v; want nil (all settled)", promise, err)
	}
	c.start(errand.WorkerConfig{})
	for i := 1; i < n; i++ {
		if err := rs[i].GetInto(c.ctx, &out); err != nil || out != fmt.Sprint("again ", i) {
			t.Errorf("%s promise broken: task %d, cancelled at shutdown, ended %q, %v; want it released and finished by another worker", promise, i, out, err)
		}
	}
	// A latecomer left unacked would come back after its lease.
	sleepUntil(c.ctx, time.Now().Add(c.lease+c.tm.Prompt))
	mu.Lock()
	defer mu.Unlock()
	if runs[0] != 1 {
		t.Errorf("%s promise broken: the task recorded within the settle grace ran %d times; want once", promise, runs[0])
	}
}

// outageBroker is a worker's view of a broker whose server stopped
// answering lease renewals: Extend fails, everything else works. It
// keeps the deliveries it fetched.
type outageBroker struct {
	errand.Broker
	mu      sync.Mutex
	fetched []*driver.Delivery
}

func (b *outageBroker) Fetch(ctx context.Context, q string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	ds, err := b.Broker.Fetch(ctx, q, limit, lease)
	b.mu.Lock()
	b.fetched = append(b.fetched, ds...)
	b.mu.Unlock()
	return ds, err
}

func (b *outageBroker) Extend(ctx context.Context, _ *driver.Delivery, _ time.Duration) error {
	return errors.New("conformance: lease renewals fail (an outage)")
}

// leaseLostCancels: worker A's lease renewals all fail, so its task's
// lease runs out. The task's ctx is cancelled with a cause satisfying
// errors.Is(cause, errand.ErrLeaseLost); worker B then runs the task
// again (the outage outlasted the lease) and records its result; when A's
// first run returns, late, with a result of its own, nothing of it is
// recorded: the task keeps B's state. The late settle of A's delivery is
// refused by the broker (driver.ErrLeaseLost, where it can tell) and
// never brings the message back.
func leaseLostCancels(t testing.TB, p workerPair) {
	const promise = "lost lease (the task's ctx is cancelled with ErrLeaseLost, and its late outcome never overwrites the next attempt's)"
	c := newWCase(t, p)
	ob := &outageBroker{Broker: c.broker}
	// A's own recorder: the task's PENDING is written through c.rec.
	recA := &recorder{Backend: c.rec.Backend, paths: map[string][]errand.State{}}
	srvA, err := errand.NewServer(errand.Config{Broker: ob, Backend: recA.backend(), DefaultQueue: c.queue})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := 0
	causes := make(chan error, 1)
	release := make(chan struct{})
	hold := func(ctx context.Context) (string, error) {
		mu.Lock()
		runs++
		run := runs
		mu.Unlock()
		if run > 1 {
			return "second", nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-release
		return "first", nil // a late success, to tempt the worker
	}
	if err := srvA.Register("hold", hold); err != nil {
		t.Fatal(err)
	}
	c.register("hold", hold)
	// One slot, held by the first run: A cannot take the task again.
	wA := srvA.NewWorker(errand.WorkerConfig{Concurrency: 1, Lease: c.tm.Lease})
	wA.Start()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		sctx, cancel := context.WithTimeout(context.Background(), c.tm.Prompt*10)
		defer cancel()
		wA.Shutdown(sctx)
	}()
	r := c.send(errand.NewSignature("hold"))
	select {
	case cause := <-causes:
		if !errors.Is(cause, errand.ErrLeaseLost) {
			t.Errorf("%s promise broken: the task's ctx, its lease never renewed, ended with cause %v; want one satisfying errors.Is(cause, errand.ErrLeaseLost)", promise, cause)
		}
	case <-time.After(c.tm.Lease + c.tm.Prompt*5):
		t.Fatalf("%s promise broken: the task's lease (%v) ran out unrenewed %v ago and its ctx is still not cancelled", promise, c.tm.Lease, c.tm.Prompt*5)
	}
	// The outage outlasted the lease: another worker runs the task.
	wB := c.srv.NewWorker(errand.WorkerConfig{Concurrency: 2, Lease: c.lease})
	wB.Start()
	var out string
	if err := r.GetInto(c.ctx, &out); err != nil || out != "second" {
		t.Fatalf("at-least-once promise broken: the task whose lease ran out ended %q, %v; want another worker to run it (\"second\")", out, err)
	}
	sctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt*10)
	defer cancel()
	if err := wB.Shutdown(sctx); err != nil {
		t.Errorf("worker B shutdown: %v", err)
	}
	close(release)
	if err := wA.Shutdown(sctx); err != nil {
		t.Errorf("worker A shutdown, its task returned: %v", err)
	}
	st, err := c.rec.Backend.GetState(c.ctx, r.Signature.UUID)
	var got string
	if err == nil && st.State == errand.StateSuccess && len(st.Results) == 1 {
		json.Unmarshal(st.Results[0].Value, &got)
	}
	if got != "second" {
		t.Errorf("%s promise broken: after the first run returned late, the task's state is %+v, %v; want the second run's SUCCESS (\"second\"), untouched", promise, st, err)
	}
	if path := recA.path(r.Signature.UUID); slices.ContainsFunc(path, func(s errand.State) bool { return s != errand.StateReceived && s != errand.StateStarted }) {
		t.Errorf("%s promise broken: the worker that lost the lease recorded %v; want RECEIVED and STARTED only", promise, path)
	}

	// A late settle of the lost delivery is refused and changes nothing.
	ob.mu.Lock()
	lost := slices.Clone(ob.fetched)
	ob.mu.Unlock()
	if len(lost) != 1 {
		t.Fatalf("worker A fetched %d deliveries, want 1", len(lost))
	}
	err = c.broker.Release(c.ctx, lost[0], time.Time{})
	switch {
	case !c.caps.DetectsLostLease:
		t.Logf("broker declares it cannot detect a lost lease; a late Release returned %v", err)
	case !errors.Is(err, driver.ErrLeaseLost):
		t.Errorf("%s promise broken: a Release of the delivery whose lease was lost, after another consumer acked the message, returned %v; want driver.ErrLeaseLost", promise, err)
	}
	fctx, fcancel := context.WithTimeout(c.ctx, c.lease+c.tm.Prompt)
	defer fcancel()
	if ds, _ := c.broker.Fetch(fctx, c.queue, 1, c.tm.Lease); len(ds) != 0 {
		t.Errorf("%s promise broken: after a late Release of a lost lease, the message another consumer acked was delivered again (%s)", promise, ds[0].ID)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != 2 {
		t.Errorf("%s: the task ran %d times; want twice (the first run's lease ran out)", promise, runs)
	}
}

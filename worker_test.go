package errand_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// Tests that hinge on timing windows (expiry, retry delays, leases,
// shutdown deadlines) run in a testing/synctest bubble: fake time, so they
// neither wait nor flake, and the bubble fails the test if any goroutine
// outlives it.
//
// The end-to-end promises every driver keeps (retries, workflows, failures,
// bad input, redelivery, shutdown) are checked by conformance.RunWorker over
// the memory drivers (conformance/memory_test.go). The tests here cover what
// is errand's alone: concurrency, lease extension, hooks, results, leaks.

func add(a, b int) (int, error) { return a + b, nil }

func TestSendTaskAndGet(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	if err := e.srv.Register("add", add); err != nil {
		t.Fatal(err)
	}
	e.start(t, errand.WorkerConfig{Concurrency: 4})
	ctx := ctxT(t)
	r, err := e.srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	var sum int
	if err := r.GetInto(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	if sum != 5 {
		t.Fatalf("add(2, 3) = %d, want 5", sum)
	}
	st, err := r.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != errand.StateSuccess || st.StartedAt.IsZero() || st.FinishedAt.IsZero() || st.CreatedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Fatalf("state after success = %+v, want SUCCESS with created, started <= finished timestamps", st)
	}
	want := []errand.State{errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateSuccess}
	if got := e.rec.path(r.Signature.UUID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("state path = %v, want %v", got, want)
	}
}

func TestGetUnknownOrExpiredErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := ctxT(t)
		be := memorybackend.New(&memorybackend.Options{ResultExpiry: 50 * time.Millisecond})
		defer be.Close()
		srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: be})
		r := srv.Result("no-such-task")
		if _, err := r.Get(ctx); !errors.Is(err, errand.ErrTaskNotFound) {
			t.Fatalf("Get(unknown) = %v, want ErrTaskNotFound at once", err)
		}
		// A task nobody runs: its PENDING state expires, and the waiter is told.
		r, err := srv.SendTask(ctx, errand.NewSignature("nobody-runs-this"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx); !errors.Is(err, errand.ErrTaskNotFound) {
			t.Fatalf("Get(expired) = %v, want ErrTaskNotFound", err)
		}
	})
}

func TestMiddlewareAndErrorHandler(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("add", add)
	e.srv.Register("bad", func() error { return errand.Permanent(errors.New("nope")) })
	var mu sync.Mutex
	var events []string
	e.start(t, errand.WorkerConfig{
		Middleware: []errand.Middleware{func(next errand.TaskHandler) errand.TaskHandler {
			return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
				mu.Lock()
				events = append(events, "pre "+sig.Name)
				mu.Unlock()
				st, err := next(ctx, sig)
				if st != nil {
					mu.Lock()
					events = append(events, "post "+sig.Name+" "+string(st.State))
					mu.Unlock()
				}
				return st, err
			}
		}},
		ErrorHandler: func(err error) {
			mu.Lock()
			events = append(events, "error "+err.Error())
			mu.Unlock()
		},
	})
	ctx := ctxT(t)
	r1, _ := e.srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	r1.Get(ctx)
	r2, _ := e.srv.SendTask(ctx, errand.NewSignature("bad"))
	r2.Get(ctx)
	waitFor(t, "post hook of the failed task", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 5
	})
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(events, "|")
	for _, want := range []string{"pre add", "post add SUCCESS", "pre bad", "post bad FAILURE", "error errand: task bad"} {
		if !strings.Contains(got, want) {
			t.Errorf("hook events %q lack %q", got, want)
		}
	}
}

func TestShutdownOfIdleAndNeverStartedWorkers(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.srv.NewWorker(errand.WorkerConfig{}).Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of a never-started worker = %v", err)
	}
	w := e.srv.NewWorker(errand.WorkerConfig{Concurrency: 50})
	w.Start()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of an idle worker = %v", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- e.srv.NewWorker(errand.WorkerConfig{}).Run(rctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after its ctx is cancelled = %v, want nil", err)
	}
}

// TestRetryThenSucceed: a task failing twice succeeds on its third attempt,
// sees its attempt number, and goes RETRY twice.
func TestRetryThenSucceed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var attempts []int
		var mu sync.Mutex
		e.srv.Register("flaky", func(ctx context.Context) (string, error) {
			ti, _ := errand.TaskInfoFrom(ctx)
			mu.Lock()
			attempts = append(attempts, ti.Attempt)
			mu.Unlock()
			if ti.Attempt < 3 {
				return "", fmt.Errorf("transient failure %d", ti.Attempt)
			}
			return "ok", nil
		})
		e.start(t, errand.WorkerConfig{})
		ctx := ctxT(t)
		sig := errand.NewSignature("flaky")
		sig.RetryCount = 3
		r, err := e.srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := r.GetInto(ctx, &got); err != nil || got != "ok" {
			t.Fatalf("Get = %q, %v; want ok", got, err)
		}
		if fmt.Sprint(attempts) != "[1 2 3]" {
			t.Fatalf("attempts seen by the task = %v, want [1 2 3]", attempts)
		}
		path := fmt.Sprint(e.rec.path(sig.UUID))
		if want := "[PENDING RECEIVED STARTED RETRY RECEIVED STARTED RETRY RECEIVED STARTED SUCCESS]"; path != want {
			t.Fatalf("state path = %s, want %s", path, want)
		}
	})
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func TestOversizedPayloadRefusedBeforeSend(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	srv, _ := errand.NewServer(errand.Config{Broker: newLimited(1024), Backend: e.rec})
	sig := errand.NewSignature("add", strings.Repeat("x", 2000), 1)
	_, err := srv.SendTask(ctx, sig)
	var pe *errand.PayloadError
	if !errors.Is(err, errand.ErrPayloadTooLarge) || !errors.As(err, &pe) || pe.Limit != 1024 {
		t.Fatalf("SendTask(oversized) = %v, want a *PayloadError with limit 1024", err)
	}
	if _, err := e.rec.GetState(ctx, sig.UUID); !errors.Is(err, errand.ErrTaskNotFound) {
		t.Fatalf("an oversized task left a state behind (%v): nothing should be written", err)
	}
}

// TestShutdownReleasesUnfinished: a worker whose shutdown times out gives
// its running task back; a second worker completes it.
func TestShutdownReleasesUnfinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		started := make(chan struct{}, 1)
		var runs atomic.Int32
		e.srv.Register("long", func(ctx context.Context) (string, error) {
			if runs.Add(1) == 1 {
				started <- struct{}{}
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "done", nil
		})
		w1 := e.srv.NewWorker(errand.WorkerConfig{Lease: time.Minute})
		w1.Start()
		ctx := ctxT(t)
		r, _ := e.srv.SendTask(ctx, errand.NewSignature("long"))
		<-started
		sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := w1.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want DeadlineExceeded (the task outlived the timeout)", err)
		}
		// Shutdown returned at its deadline, cancelling the task; the
		// worker releases it in the background as it returns.
		synctest.Wait()
		qi, _ := e.srv.Queue(ctx, errand.DefaultQueue)
		st := qi.Stats
		if st.Pending != 1 || st.InFlight != 0 {
			t.Fatalf("after shutdown the queue holds %+v, want the unfinished task released (1 pending, 0 in flight)", st)
		}
		e.start(t, errand.WorkerConfig{})
		var out string
		if err := r.GetInto(ctx, &out); err != nil || out != "done" {
			t.Fatalf("second worker: %q, %v; want done", out, err)
		}
	})
}

func TestConcurrencyBound(t *testing.T) {
	e := newEnv(t)
	var cur, peak atomic.Int32
	release := make(chan struct{})
	e.srv.Register("hold", func() error {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		cur.Add(-1)
		return nil
	})
	e.start(t, errand.WorkerConfig{Concurrency: 3})
	ctx := ctxT(t)
	var rs []*errand.AsyncResult
	for range 10 {
		r, _ := e.srv.SendTask(ctx, errand.NewSignature("hold"))
		rs = append(rs, r)
	}
	waitFor(t, "3 tasks running", func() bool { return cur.Load() == 3 })
	qi, _ := e.srv.Queue(ctx, errand.DefaultQueue)
	st := qi.Stats
	if st.InFlight != 3 || st.Pending != 7 {
		t.Fatalf("with 3 slots busy the queue holds %+v, want 3 in flight and 7 pending (no prefetch beyond free slots)", st)
	}
	close(release)
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak concurrency = %d, want 3", p)
	}
}

func TestLeaseExtendedWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var runs atomic.Int32
		release := make(chan struct{})
		e.srv.Register("hold", func() error { runs.Add(1); <-release; return nil })
		e.start(t, errand.WorkerConfig{Lease: 30 * time.Millisecond, Concurrency: 2})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free) // before the worker's shutdown, should the test fail first
		ctx := ctxT(t)
		r, _ := e.srv.SendTask(ctx, errand.NewSignature("hold"))
		waitFor(t, "task running", func() bool { return runs.Load() == 1 })
		// Hold the task for several leases; a second consumer must not get it.
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) {
			fctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			ds, _ := e.broker.Fetch(fctx, errand.DefaultQueue, 1, time.Second)
			cancel()
			if len(ds) > 0 {
				t.Fatalf("a running task's delivery reached another consumer: its lease was not extended")
			}
		}
		free()
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("runs = %d, want 1", n)
		}
	})
}

// TestRegisterTasksAllOrNothing: one bad entry registers none of the map
// and names every bad entry (issue 14, item 6: a random subset of the good
// functions used to be kept, by map order).
func TestRegisterTasksAllOrNothing(t *testing.T) {
	for range 20 { // map order varies from run to run
		srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
		err := srv.RegisterTasks(map[string]any{
			"a": add, "b": add, "c": add, "bad1": 42, "d": add, "bad2": func() {},
		})
		if err == nil || !strings.Contains(err.Error(), `"bad1"`) || !strings.Contains(err.Error(), `"bad2"`) {
			t.Fatalf("RegisterTasks with two bad entries = %v; want an error naming both", err)
		}
		ctx := ctxT(t)
		w := srv.NewWorker(errand.WorkerConfig{UnknownTaskAttempts: 1})
		w.Start()
		r, _ := srv.SendTask(ctx, errand.NewSignature("a", 1, 2))
		_, err = r.Get(ctx)
		w.Shutdown(ctx)
		if !isTaskFailure(err) || !strings.Contains(err.Error(), "no function is registered") {
			t.Fatalf("after a refused RegisterTasks, task a ran (%v); want nothing of the map registered", err)
		}
	}
}

package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/core"
)

func add(a, b int) (int, error) { return a + b, nil }

func TestSendTaskAndGet(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	if err := e.srv.Register("add", add); err != nil {
		t.Fatal(err)
	}
	e.start(t, core.WorkerConfig{Concurrency: 4})
	ctx := ctxT(t)
	r, err := e.srv.SendTask(ctx, core.NewSignature("add", 2, 3))
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
	if st.State != core.StateSuccess || st.StartedAt.IsZero() || st.FinishedAt.IsZero() || st.CreatedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Fatalf("state after success = %+v, want SUCCESS with created, started <= finished timestamps", st)
	}
	want := []core.State{core.StatePending, core.StateReceived, core.StateStarted, core.StateSuccess}
	if got := e.rec.path(r.Signature.UUID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("state path = %v, want %v", got, want)
	}
}

func TestGetUnknownOrExpiredErrors(t *testing.T) {
	ctx := ctxT(t)
	be := memorybackend.New(&memorybackend.Options{ResultExpiry: 50 * time.Millisecond})
	defer be.Close()
	r := core.NewAsyncResult(&core.Signature{UUID: "no-such-task"}, be)
	if _, err := r.Get(ctx); !errors.Is(err, core.ErrTaskNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrTaskNotFound at once", err)
	}
	// A task nobody runs: its PENDING state expires, and the waiter is told.
	srv, _ := core.NewServer(core.Config{Broker: memorybroker.New(nil), Backend: be})
	r, err := srv.SendTask(ctx, core.NewSignature("nobody-runs-this"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx); !errors.Is(err, core.ErrTaskNotFound) {
		t.Fatalf("Get(expired) = %v, want ErrTaskNotFound", err)
	}
}

func TestHooksAndErrorHandler(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("add", add)
	e.srv.Register("bad", func() error { return core.Permanent(errors.New("nope")) })
	var mu sync.Mutex
	var events []string
	e.start(t, core.WorkerConfig{
		PreTaskHook: func(ctx context.Context, sig *core.Signature) {
			mu.Lock()
			events = append(events, "pre "+sig.Name)
			mu.Unlock()
		},
		PostTaskHook: func(ctx context.Context, sig *core.Signature, st *core.TaskState) {
			mu.Lock()
			events = append(events, "post "+sig.Name+" "+string(st.State))
			mu.Unlock()
		},
		ErrorHandler: func(err error) {
			mu.Lock()
			events = append(events, "error "+err.Error())
			mu.Unlock()
		},
	})
	ctx := ctxT(t)
	r1, _ := e.srv.SendTask(ctx, core.NewSignature("add", 1, 2))
	r1.Get(ctx)
	r2, _ := e.srv.SendTask(ctx, core.NewSignature("bad"))
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
	if err := e.srv.NewWorker(core.WorkerConfig{}).Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of a never-started worker = %v", err)
	}
	w := e.srv.NewWorker(core.WorkerConfig{Concurrency: 50})
	w.Start()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of an idle worker = %v", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- e.srv.NewWorker(core.WorkerConfig{}).Run(rctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after its ctx is cancelled = %v, want nil", err)
	}
}

// TestRetryThenSucceed: a task failing twice succeeds on its third attempt,
// sees its attempt number, and goes RETRY twice.
func TestRetryThenSucceed(t *testing.T) {
	e := newEnv(t)
	var attempts []int
	var mu sync.Mutex
	e.srv.Register("flaky", func(ctx context.Context) (string, error) {
		ti, _ := core.TaskInfoFrom(ctx)
		mu.Lock()
		attempts = append(attempts, ti.Attempt)
		mu.Unlock()
		if ti.Attempt < 3 {
			return "", fmt.Errorf("transient failure %d", ti.Attempt)
		}
		return "ok", nil
	})
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	sig := core.NewSignature("flaky")
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
}

func TestRetryExhaustedFails(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	e.srv.Register("always", func() error { calls.Add(1); return errors.New("boom") })
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	sig := core.NewSignature("always")
	sig.RetryCount = 2
	r, _ := e.srv.SendTask(ctx, sig)
	_, err := r.Get(ctx)
	if !core.IsTaskFailure(err) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Get = %v, want the task's failure with its error text", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("calls = %d, want 3 (1 + RetryCount 2)", n)
	}
}

func TestPermanentErrorNoRetry(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	e.srv.Register("perm", func() error { calls.Add(1); return fmt.Errorf("wrapped: %w", core.Permanent(errors.New("bad input"))) })
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	sig := core.NewSignature("perm")
	sig.RetryCount = 5
	r, _ := e.srv.SendTask(ctx, sig)
	if _, err := r.Get(ctx); !core.IsTaskFailure(err) {
		t.Fatalf("Get = %v, want failure", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("calls = %d, want 1: a permanent error is never retried", n)
	}
}

func TestRetryLaterHonouredAndBounded(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var times []time.Time
	e.srv.Register("later", func() error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return core.RetryLater(30*time.Millisecond, errors.New("not yet"))
	})
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	sig := core.NewSignature("later")
	sig.RetryCount = 2
	r, _ := e.srv.SendTask(ctx, sig)
	if _, err := r.Get(ctx); !core.IsTaskFailure(err) {
		t.Fatalf("Get = %v, want failure once retries are used up", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 3 {
		t.Fatalf("runs = %d, want 3: retry-later counts against RetryCount 2", len(times))
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 30*time.Millisecond {
			t.Fatalf("retry %d ran %v after the previous run, before the requested 30ms", i, gap)
		}
	}
}

func TestPanicBecomesFailureWithStack(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("panics", func() error { panic("kaboom") })
	e.srv.Register("add", add)
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	r, _ := e.srv.SendTask(ctx, core.NewSignature("panics"))
	_, err := r.Get(ctx)
	if !core.IsTaskFailure(err) || !strings.Contains(err.Error(), "kaboom") || !strings.Contains(err.Error(), "worker_test.go") {
		t.Fatalf("Get = %v, want a failure with the panic value and a stack naming the task's file", err)
	}
	// The worker survived: it still runs tasks.
	r2, _ := e.srv.SendTask(ctx, core.NewSignature("add", 1, 1))
	if _, err := r2.Get(ctx); err != nil {
		t.Fatalf("worker did not survive a panicking task: %v", err)
	}
}

func TestTimeoutFails(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("slow", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	sig := core.NewSignature("slow")
	sig.Timeout = 20 * time.Millisecond
	r, _ := e.srv.SendTask(ctx, sig)
	_, err := r.Get(ctx)
	if !core.IsTaskFailure(err) || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("Get = %v, want FAILURE from the task timeout", err)
	}
}

func TestBadInputFailsClearly(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("add", add)
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	cases := []struct {
		name string
		sig  *core.Signature
		want []string
		is   error
	}{
		{"unknown task", core.NewSignature("nope", 1), []string{`"nope"`, "unknown task"}, core.ErrUnknownTask},
		{"wrong type", core.NewSignature("add", 1, "two"), []string{`task "add"`, "argument 1", "string", "int"}, core.ErrBadArguments},
		{"wrong count", core.NewSignature("add", 1), []string{`task "add"`, "got 1 arguments", "takes 2"}, core.ErrBadArguments},
	}
	for _, c := range cases {
		c.sig.RetryCount = 3 // must not be retried
		r, err := e.srv.SendTask(ctx, c.sig)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Get(ctx)
		if !core.IsTaskFailure(err) {
			t.Fatalf("%s: Get = %v, want FAILURE", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
		if p := e.rec.path(c.sig.UUID); len(p) != 3 {
			t.Errorf("%s: state path %v, want PENDING RECEIVED FAILURE (no retry, no start)", c.name, p)
		}
	}
	// Malformed bytes straight on the queue: set aside, worker goes on.
	if err := e.broker.Publish(ctx, core.Message{ID: "garbage", Queue: core.DefaultQueue, Body: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	r, _ := e.srv.SendTask(ctx, core.NewSignature("add", 20, 22))
	var n int
	if err := r.GetInto(ctx, &n); err != nil || n != 42 {
		t.Fatalf("after a malformed message, add = %d, %v; want 42", n, err)
	}
	waitFor(t, "malformed message in dead letters", func() bool {
		dl, _ := core.DeadLetters(ctx, e.broker, core.DefaultQueue)
		return len(dl) == 1 && dl[0].ID == "garbage" && strings.Contains(dl[0].Reason, "malformed")
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
	srv, _ := core.NewServer(core.Config{Broker: newLimited(1024), Backend: e.rec})
	sig := core.NewSignature("add", strings.Repeat("x", 2000), 1)
	_, err := srv.SendTask(ctx, sig)
	var pe *core.PayloadError
	if !errors.Is(err, core.ErrPayloadTooLarge) || !errors.As(err, &pe) || pe.Limit != 1024 {
		t.Fatalf("SendTask(oversized) = %v, want a *PayloadError with limit 1024", err)
	}
	if _, err := e.rec.GetState(ctx, sig.UUID); !errors.Is(err, core.ErrTaskNotFound) {
		t.Fatalf("an oversized task left a state behind (%v): nothing should be written", err)
	}
}

func TestOnSuccessAndOnErrorCallbacks(t *testing.T) {
	e := newEnv(t)
	got := make(chan string, 4)
	e.srv.Register("add", add)
	e.srv.Register("fail", func(x int) error { return core.Permanent(fmt.Errorf("cannot do %d", x)) })
	e.srv.Register("onok", func(tag string, sum int) error { got <- fmt.Sprint("ok ", tag, " ", sum); return nil })
	e.srv.Register("onerr", func(msg, tag string) error { got <- "err " + tag + ": " + msg; return nil })
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)

	s := core.NewSignature("add", 1, 2)
	s.OnSuccess = []*core.Signature{core.NewSignature("onok", "A")}
	s.OnError = []*core.Signature{core.NewSignature("onerr", "never")}
	e.srv.SendTask(ctx, s)
	if m := <-got; m != "ok A 3" {
		t.Fatalf("OnSuccess got %q, want its own args then the results: %q", m, "ok A 3")
	}
	f := core.NewSignature("fail", 7)
	f.OnError = []*core.Signature{core.NewSignature("onerr", "B")}
	e.srv.SendTask(ctx, f)
	if m := <-got; m != "err B: cannot do 7" {
		t.Fatalf("OnError got %q, want the error text first, then its own args", m)
	}
}

// TestShutdownReleasesUnfinished: a worker whose shutdown times out gives
// its running task back; a second worker completes it.
func TestShutdownReleasesUnfinished(t *testing.T) {
	checkNoLeak(t)
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
	w1 := e.srv.NewWorker(core.WorkerConfig{Lease: time.Minute})
	w1.Start()
	ctx := ctxT(t)
	r, _ := e.srv.SendTask(ctx, core.NewSignature("long"))
	<-started
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w1.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded (the task outlived the timeout)", err)
	}
	st, _ := core.Stats(ctx, e.broker, core.DefaultQueue)
	if st.Pending != 1 || st.InFlight != 0 {
		t.Fatalf("after shutdown the queue holds %+v, want the unfinished task released (1 pending, 0 in flight)", st)
	}
	e.start(t, core.WorkerConfig{})
	var out string
	if err := r.GetInto(ctx, &out); err != nil || out != "done" {
		t.Fatalf("second worker: %q, %v; want done", out, err)
	}
}

// TestCrashedWorkerLeaseRedelivers: a delivery taken and never settled (a
// crashed consumer) comes back after its lease and is completed.
func TestCrashedWorkerLeaseRedelivers(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("add", add)
	ctx := ctxT(t)
	r, _ := e.srv.SendTask(ctx, core.NewSignature("add", 4, 5))
	ds, err := e.broker.Fetch(ctx, core.DefaultQueue, 1, 30*time.Millisecond)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch = %v, %v", ds, err)
	}
	// The "crashed" consumer never acks; a worker picks it up after the lease.
	e.start(t, core.WorkerConfig{})
	var n int
	if err := r.GetInto(ctx, &n); err != nil || n != 9 {
		t.Fatalf("redelivered task: %d, %v; want 9", n, err)
	}
	if err := e.broker.Ack(ctx, ds[0]); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("late ack from the crashed consumer = %v, want ErrLeaseLost", err)
	}
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
	e.start(t, core.WorkerConfig{Concurrency: 3})
	ctx := ctxT(t)
	var rs []*core.AsyncResult
	for range 10 {
		r, _ := e.srv.SendTask(ctx, core.NewSignature("hold"))
		rs = append(rs, r)
	}
	waitFor(t, "3 tasks running", func() bool { return cur.Load() == 3 })
	st, _ := core.Stats(ctx, e.broker, core.DefaultQueue)
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
	e := newEnv(t)
	var runs atomic.Int32
	release := make(chan struct{})
	e.srv.Register("hold", func() error { runs.Add(1); <-release; return nil })
	e.start(t, core.WorkerConfig{Lease: 30 * time.Millisecond, Concurrency: 2})
	ctx := ctxT(t)
	r, _ := e.srv.SendTask(ctx, core.NewSignature("hold"))
	waitFor(t, "task running", func() bool { return runs.Load() == 1 })
	// Hold the task for several leases; a second consumer must not get it.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		ds, _ := e.broker.Fetch(fctx, core.DefaultQueue, 1, time.Second)
		cancel()
		if len(ds) > 0 {
			t.Fatalf("a running task's delivery reached another consumer: its lease was not extended")
		}
	}
	close(release)
	if _, err := r.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("runs = %d, want 1", n)
	}
}

package errand_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

type stepProgress struct {
	Done, Total int
}

// TestProgress: a producer reads the progress a running task reports; the
// final state keeps the last value; an oversize value is refused and
// nothing of it is written; SetProgress outside a task and after the task
// returned is an error.
func TestProgress(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	release := make(chan struct{})
	var escaped context.Context
	refused := make(chan error, 1)
	e.srv.Register("long", func(ctx context.Context) (int, error) {
		escaped = ctx
		if err := errand.SetProgress(ctx, stepProgress{1, 3}); err != nil {
			return 0, err
		}
		<-release
		refused <- errand.SetProgress(ctx, strings.Repeat("x", 5000))
		if err := errand.SetProgress(ctx, stepProgress{3, 3}); err != nil {
			return 0, err
		}
		return 3, nil
	})
	e.start(t, errand.WorkerConfig{ProgressEvery: time.Hour}) // the last value reaches the backend with the final state only
	ctx := ctxT(t)
	r, err := e.srv.SendTask(ctx, errand.NewSignature("long"))
	if err != nil {
		t.Fatal(err)
	}
	var p stepProgress
	waitFor(t, "the running task's progress", func() bool {
		ok, err := r.Progress(ctx, &p)
		if err != nil {
			t.Fatalf("Progress: %v", err)
		}
		return ok
	})
	if p != (stepProgress{1, 3}) {
		t.Fatalf("progress promise broken: the producer read %+v while the task ran, want {1 3}", p)
	}
	close(release)
	if _, err := r.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-refused; !errors.Is(err, errand.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "MaxProgressSize") {
		t.Errorf("progress promise broken: a 5000-byte progress gave %v; want an error naming MaxProgressSize, satisfying ErrPayloadTooLarge", err)
	}
	if ok, err := r.Progress(ctx, &p); err != nil || !ok || p != (stepProgress{3, 3}) {
		t.Errorf("progress promise broken: the SUCCESS state's progress is %+v (%v, %v); want the last value set, {3 3}", p, ok, err)
	}
	if err := errand.SetProgress(escaped, 1); err == nil {
		t.Error("SetProgress after the task returned: nil, want an error")
	}
	if err := errand.SetProgress(ctx, 1); err == nil || !strings.Contains(err.Error(), "not a running task") {
		t.Errorf("SetProgress outside a task: %v, want an error saying so", err)
	}
	none := e.srv.Result("unknown-task")
	if _, err := none.Progress(ctx, &p); !errors.Is(err, errand.ErrTaskNotFound) {
		t.Errorf("Progress of an unknown task: %v, want ErrTaskNotFound", err)
	}
}

// TestProgressRateLimited: a tight loop of 10000 SetProgress calls costs
// a bounded number of writes, never blocks the task on the backend, and
// the final state carries the last value.
func TestProgressRateLimited(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	const n = 10000
	every := 50 * time.Millisecond
	var took time.Duration
	e.srv.Register("tight", func(ctx context.Context) error {
		start := time.Now()
		for i := range n {
			if err := errand.SetProgress(ctx, i+1); err != nil {
				return err
			}
		}
		took = time.Since(start)
		return nil
	})
	e.start(t, errand.WorkerConfig{ProgressEvery: every})
	ctx := ctxT(t)
	sig := errand.NewSignature("tight")
	r, err := e.srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx); err != nil {
		t.Fatal(err)
	}
	var last int
	if ok, err := r.Progress(ctx, &last); err != nil || !ok || last != n {
		t.Errorf("progress promise broken: final progress %d (%v, %v), want %d", last, ok, err, n)
	}
	// One write at once, then at most one per interval while the loop ran.
	if w, bound := e.rec.progressWrites(sig.UUID), 2+int(took/every); w > bound {
		t.Errorf("progress rate limit broken: %d SetProgress calls in %v made %d writes; want at most %d (ProgressEvery %v)", n, took, w, bound, every)
	}
}

// refusesProgress is a backend that answers every progress write (a state
// with Progress) with ErrCancelled, as a backend holding the task
// CANCELLED does.
type refusesProgress struct{ errand.Backend }

func (b refusesProgress) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	errs := make([]error, len(sts))
	var rest []*errand.TaskState
	var at []int
	for i, st := range sts {
		if len(st.Progress) > 0 {
			errs[i] = fmt.Errorf("task %s: %w", st.TaskUUID, errand.ErrCancelled)
			continue
		}
		rest, at = append(rest, st), append(at, i)
	}
	for j, err := range b.Backend.SetStates(ctx, rest) {
		errs[at[j]] = err
	}
	return errs
}

// TestProgressWriteCancels: a progress write the backend answers with
// ErrCancelled cancels the task's ctx with a cause wrapping ErrCancelled,
// SetProgress returns that cause from then on, and the task's outcome is
// discarded (no RETRY, no FAILURE).
func TestProgressWriteCancels(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	srv, err := errand.NewServer(errand.Config{Broker: e.broker, Backend: refusesProgress{e.rec}})
	if err != nil {
		t.Fatal(err)
	}
	saw := make(chan error, 2)
	srv.Register("watched", func(ctx context.Context) error {
		if err := errand.SetProgress(ctx, "half"); err != nil {
			return err
		}
		<-ctx.Done()
		saw <- context.Cause(ctx)
		saw <- errand.SetProgress(ctx, "more")
		return ctx.Err()
	})
	w := srv.NewWorker(errand.WorkerConfig{RetryPolicy: errand.Fixed(0)})
	w.Start()
	sig := errand.NewSignature("watched")
	sig.RetryCount = 3
	if _, err := srv.SendTask(ctxT(t), sig); err != nil {
		t.Fatal(err)
	}
	var cause error
	select {
	case cause = <-saw:
	case <-time.After(10 * time.Second): // a bound against a hang
		t.Fatal("cancel promise broken: the task's ctx was never cancelled after the backend refused its progress as cancelled")
	}
	if !errors.Is(cause, errand.ErrCancelled) {
		t.Fatalf("cancel promise broken: the task's ctx ended with cause %v, want one wrapping ErrCancelled (its progress write was refused as cancelled)", cause)
	}
	if err := <-saw; !errors.Is(err, errand.ErrCancelled) {
		t.Errorf("SetProgress after the cancel: %v, want an error wrapping ErrCancelled", err)
	}
	// Shutdown returns once the delivery is settled.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("worker shutdown: %v", err)
	}
	if n, err := e.broker.Stats(ctx, sig.RoutingKey); err != nil || n.Pending != 0 || n.InFlight != 0 || n.Delayed != 0 {
		t.Errorf("cancel promise broken: after the cancel the queue holds %+v (%v); want the delivery acked, no retry sent", n, err)
	}
	if p := e.rec.path(sig.UUID); fmt.Sprint(p) != "[PENDING RECEIVED STARTED]" {
		t.Errorf("cancel promise broken: a task cancelled through its progress write went through %v; want no state after STARTED (its outcome discarded)", p)
	}
}

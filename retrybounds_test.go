package errand_test

// Issue 15, item 3: retry arithmetic that cannot spin or overflow, and a
// worker-side cap on RetryCount.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// returnsWithin runs f on its own goroutine and fails t if it has not
// returned after limit: the retry arithmetic must never loop for ever.
func returnsWithin(t *testing.T, what string, limit time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("retry arithmetic promise broken: %s still running after %v (an endless loop on overflow)", what, limit)
	}
}

func TestRetryArithmeticSaturates(t *testing.T) {
	for _, n := range []int{math.MaxInt, math.MaxInt - 1, 7540113804746346429, 4660046610375530309} {
		var got int
		returnsWithin(t, fmt.Sprintf("FibonacciNext(%d)", n), 5*time.Second, func() { got = errand.FibonacciNext(n) })
		if got < n {
			t.Errorf("retry arithmetic promise broken: FibonacciNext(%d) = %d, want a value >= n (saturated at MaxInt)", n, got)
		}
	}
	huge := &errand.Signature{Attempt: 1e9, RetryTimeout: math.MaxInt}
	for _, p := range []errand.RetryPolicy{
		errand.Fibonacci{Unit: time.Second},
		errand.Fibonacci{Unit: time.Hour},
		errand.Exponential{Base: time.Second},
		errand.Exponential{Base: time.Second, Jitter: 1},
		errand.Exponential{Base: time.Hour, Max: math.MaxInt64, Jitter: 0.5},
	} {
		var d time.Duration
		returnsWithin(t, fmt.Sprintf("%#v.RetryDelay(attempt 1e9, RetryTimeout MaxInt)", p), 5*time.Second, func() { d = p.RetryDelay(huge, errors.New("x")) })
		if d < time.Hour {
			t.Errorf("retry arithmetic promise broken: %#v.RetryDelay(attempt 1e9, RetryTimeout MaxInt) = %v; a delay must saturate, never overflow to a small or negative one", p, d)
		}
	}
}

// TestHugeRetryTimeoutDoesNotSpin: a failing task with RetryTimeout near
// MaxInt64 reaches RETRY (with a far ETA) instead of keeping a worker
// goroutine spinning in the Fibonacci step with the state STARTED, and
// Shutdown is not held.
func TestHugeRetryTimeoutDoesNotSpin(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("fails", func() error { return errors.New("always fails") })
	w := e.srv.NewWorker(errand.WorkerConfig{RetryPolicy: errand.Fibonacci{Unit: time.Second}})
	w.Start()
	ctx := ctxT(t)
	sig := errand.NewSignature("fails")
	sig.RetryTimeout, sig.RetryCount = math.MaxInt, 1e9
	r, err := e.srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "RETRY after a failure with RetryTimeout MaxInt (retry arithmetic promise: the worker must not spin computing the delay, leaving the task STARTED)", func() bool {
		st, err := r.State(ctx)
		return err == nil && st.State == errand.StateRetry
	})
	returnsWithin(t, "Shutdown of the worker that retried it", 10*time.Second, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.Shutdown(sctx); err != nil {
			t.Errorf("shutdown promise broken: Shutdown = %v after a huge retry delay", err)
		}
	})
	delayed, err := listed(ctx, e.broker, errand.DefaultQueue, driver.ListScheduled)
	if err != nil {
		t.Fatal(err)
	}
	if len(delayed) != 1 || !delayed[0].At.After(time.Now().Add(100*365*24*time.Hour)) {
		t.Fatalf("retry arithmetic promise broken: the delayed retries are %+v, want one message delayed by the saturated delay (centuries)", delayed)
	}
}

// runsUntilFailure sends a task failing every time with RetryCount 1e9 to
// a worker made with cfg and returns how many times it ran before FAILURE.
func runsUntilFailure(t *testing.T, cfg errand.WorkerConfig) int {
	t.Helper()
	e := newEnv(t)
	var runs atomic.Int64
	e.srv.Register("fails", func() error { runs.Add(1); return errors.New("always fails") })
	cfg.RetryPolicy = errand.Fixed(time.Second)
	e.start(t, cfg)
	// Fake time (synctest): an hour is 3600 retries, then the case fails.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	sig := errand.NewSignature("fails")
	sig.RetryCount = 1e9
	r, err := e.srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx); !isTaskFailure(err) {
		t.Fatalf("retry cap promise broken: a task with RetryCount 1e9 still not FAILURE after %d runs (Get: %v)", runs.Load(), err)
	}
	return int(runs.Load())
}

func TestMaxRetriesCapsRetryCount(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			if n := runsUntilFailure(t, errand.WorkerConfig{}); n != 101 {
				t.Fatalf("retry cap promise broken: RetryCount 1e9 ran %d times under the default MaxRetries, want 101 (100 retries)", n)
			}
		})
	})
	t.Run("configured", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			if n := runsUntilFailure(t, errand.WorkerConfig{MaxRetries: 3}); n != 4 {
				t.Fatalf("retry cap promise broken: RetryCount 1e9 ran %d times with MaxRetries 3, want 4", n)
			}
		})
	})
	t.Run("negative allows none", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			if n := runsUntilFailure(t, errand.WorkerConfig{MaxRetries: -1}); n != 1 {
				t.Fatalf("retry cap promise broken: RetryCount 1e9 ran %d times with MaxRetries -1, want 1 (no retries)", n)
			}
		})
	})
}

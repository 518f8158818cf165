package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
)

// SilentServerHarness tells RunShutdownSilentServer how to reach a broker's
// real server through a Proxy.
type SilentServerHarness struct {
	// Target is the real server's host:port.
	Target string
	// Broker returns a broker whose client connects to addr (the proxy in
	// front of Target) instead of Target. Register its teardown with
	// t.Cleanup. It is called twice: for the worker that meets the silent
	// server, and for the one that finishes the tasks afterwards.
	Broker func(t testing.TB, addr string) errand.Broker
	// Timing tunes the waits; Lease bounds how long tasks stay leased to
	// the worker that met the silent server. It must outlast
	// ShutdownDeadline, or the worker, unable to renew its leases, would
	// cancel the tasks when their leases ran out (errand.ErrLeaseLost)
	// before Shutdown gave up on them. Default lease: ShutdownDeadline +
	// 2×ShutdownSlack (7s).
	Timing Timing
}

// ShutdownDeadline is the Shutdown deadline RunShutdownSilentServer gives a
// worker, and ShutdownSlack how much longer Shutdown may take, and how
// much longer than its settle grace (ShutdownSlack/2 there) the worker
// may take to stop after that deadline.
const (
	ShutdownDeadline = 5 * time.Second
	ShutdownSlack    = time.Second
)

// RunShutdownSilentServer checks that a worker's Shutdown returns by its
// deadline (plus ShutdownSlack) while the broker's server accepts
// connections but answers nothing; that the worker then stops (a second
// Shutdown returns nil) within its settle grace (WorkerConfig.SettleGrace,
// ShutdownSlack/2 here) plus ShutdownSlack, once the grace has cancelled
// every call still open; and that the tasks it was running are not lost:
// once the server answers again, another worker completes them. The
// driver's part is to return from every call by its ctx deadline or
// cancellation (and from Fetch soon after its ctx is done); errand's is
// to bound every call it makes while shutting down.
func RunShutdownSilentServer(t *testing.T, h SilentServerHarness) {
	if h.Timing.Lease <= 0 {
		h.Timing.Lease = ShutdownDeadline + 2*ShutdownSlack
	}
	tm := h.Timing.withDefaults()
	t.Run("Shutdown/SilentServer", func(t *testing.T) {
		guard(t, tm.Watchdog, func() { shutdownSilent(t, h, tm) })
	})
	t.Run("Shutdown/SilentServerWhileAcking", func(t *testing.T) {
		guard(t, tm.Watchdog, func() { shutdownSilentAcking(t, h, tm) })
	})
}

// shutdownSilent: the server goes silent while tasks run; Shutdown gives
// up on them and cannot send their releases.
func shutdownSilent(t testing.TB, h SilentServerHarness, tm Timing) {
	shutdownSilentCase(t, h, tm, false)
}

// shutdownSilentAcking: the server goes silent just as tasks finish, so
// their acks hang (issue 14, item 4: SQS's ack batcher used to hold
// Shutdown 30s past its deadline).
func shutdownSilentAcking(t testing.TB, h SilentServerHarness, tm Timing) {
	shutdownSilentCase(t, h, tm, true)
}

func shutdownSilentCase(t testing.TB, h SilentServerHarness, tm Timing, acking bool) {
	ctx := caseCtx(t, tm)
	proxy := NewProxy(t, h.Target)
	queue := name(t, "q")
	backend := memorybackend.New(nil)
	t.Cleanup(func() { backend.Close() })

	const n = 2
	started := make(chan string, n)
	finish := make(chan struct{}) // closed: the tasks finish (acking only)
	srv, err := errand.NewServer(errand.Config{Broker: h.Broker(t, proxy.Addr()), Backend: backend, DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register("wait", func(ctx context.Context, id string) (string, error) {
		started <- id
		if acking {
			<-finish // finishes once the server is silent: its ack hangs
			return "done " + id, nil
		}
		<-ctx.Done() // runs until the worker gives up on it
		return "", ctx.Err()
	})
	const grace = ShutdownSlack / 2
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: n, Lease: tm.Lease, SettleGrace: grace})
	w.Start()
	var results []*errand.AsyncResult
	for i := range n {
		r, err := srv.SendTask(ctx, errand.NewSignature("wait", fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("SendTask: %v", err)
		}
		results = append(results, r)
	}
	for range n {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatalf("tasks did not start: %v", ctx.Err())
		}
	}

	proxy.Stall()
	what := "while its tasks ran"
	if acking {
		what = "while its finished tasks were being acked"
		close(finish)
		for i, r := range results { // written to the (healthy) backend before the ack
			var got string
			if err := r.GetInto(ctx, &got); err != nil {
				t.Fatalf("task %d did not finish: %v", i, err)
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownDeadline)
	defer cancel()
	begun := time.Now()
	err = w.Shutdown(sctx)
	took := time.Since(begun)
	t.Logf("Shutdown with a %v deadline returned after %v on a server silent %s: %v", ShutdownDeadline, took.Round(time.Millisecond), what, err)
	if took > ShutdownDeadline+ShutdownSlack {
		t.Errorf("shutdown promise broken: Shutdown with a %v deadline took %v on a server silent %s; want at most %v (every broker call must end by its ctx deadline)", ShutdownDeadline, took, what, ShutdownDeadline+ShutdownSlack)
	}
	if !acking && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown past its deadline returned %v, want context.DeadlineExceeded", err)
	}
	// The settle grace ends, cancelling every call still open: each must
	// return, and the worker stop.
	wctx, wcancel := context.WithTimeout(context.Background(), grace+ShutdownSlack)
	defer wcancel()
	if err := w.Shutdown(wctx); err != nil {
		t.Errorf("shutdown promise broken: the worker was still stopping %v after Shutdown returned (its settle grace %v, which cancels every call still open, plus %v) on a server silent %s: a call ignores its ctx (%v)",
			time.Since(begun)-took, grace, ShutdownSlack, what, err)
	}

	// The server answers again: the tasks come back (their release could
	// not be sent, so after their lease) and another worker finishes them.
	proxy.Resume()
	srv2, err := errand.NewServer(errand.Config{Broker: h.Broker(t, h.Target), Backend: backend, DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	srv2.Register("wait", func(id string) (string, error) { return "done " + id, nil })
	w2 := srv2.NewWorker(errand.WorkerConfig{Concurrency: n, Lease: tm.Lease})
	w2.Start()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w2.Shutdown(sctx)
	})
	var wg sync.WaitGroup
	for i, r := range results {
		wg.Go(func() {
			var got string
			if err := r.GetInto(ctx, &got); err != nil || got != fmt.Sprint("done ", i) {
				t.Errorf("at-least-once promise broken: task %d, running when the server went silent and the worker shut down, ended with %q, %v; want it run again to %q", i, got, err, fmt.Sprint("done ", i))
			}
		})
	}
	wg.Wait()
}

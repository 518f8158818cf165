package errand_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// A redelivery of a task already finished (SUCCESS or FAILURE recorded) is
// settled before the worker's middleware, on a backend that begins
// attempts in one call (driver.Starter: the memory backend) and on one
// that does not (the same backend with Start hidden): the middleware sees
// the fresh task beside them and never the finished ones, and their
// functions do not run again.
func TestRedeliveryOfFinishedWorkNeverReachesMiddleware(t *testing.T) {
	for _, tc := range []struct {
		name    string
		starter bool
	}{{"Starter", true}, {"not-Starter", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			br := memorybroker.New(nil)
			mb := memorybackend.New(nil)
			var be errand.Backend = mb
			if _, ok := be.(driver.Starter); !ok {
				t.Fatal("the memory backend is no longer a driver.Starter: this test no longer covers the one-call path")
			}
			if !tc.starter {
				be = struct{ errand.Backend }{mb} // hides Start (and every other optional capability)
			}
			srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close(); br.Close(); mb.Close() })

			var mu sync.Mutex
			seen := map[string]int{}
			ran := map[string]int{}
			srv.Register("t", func(ctx context.Context) error {
				ti, _ := errand.TaskInfoFrom(ctx)
				mu.Lock()
				ran[ti.UUID]++
				mu.Unlock()
				return nil
			})
			watch := func(next errand.TaskHandler) errand.TaskHandler {
				return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
					mu.Lock()
					seen[sig.UUID]++
					mu.Unlock()
					return next(ctx, sig)
				}
			}

			// Two messages of tasks whose outcome is already recorded, as a
			// worker that crashed after recording it and before its ack
			// leaves them, then a fresh task.
			const q = "redelivered"
			finished := map[string]errand.State{}
			for _, state := range []errand.State{errand.StateSuccess, errand.StateFailure} {
				sig := errand.NewSignature("t")
				sig.RoutingKey = q
				now := time.Now().UTC()
				st := &errand.TaskState{TaskUUID: sig.UUID, TaskName: "t", State: state, Attempt: 1, CreatedAt: now, StartedAt: now, FinishedAt: now}
				if state == errand.StateFailure {
					st.Error = "failed for good before the crash"
				}
				if err := setState(ctx, mb, st); err != nil {
					t.Fatal(err)
				}
				body, err := errand.EncodeSignature(sig)
				if err != nil {
					t.Fatal(err)
				}
				if err := br.Publish(ctx, driver.Message{ID: sig.UUID, Queue: q, Body: body}); err != nil {
					t.Fatal(err)
				}
				finished[sig.UUID] = state
			}
			fresh := errand.NewSignature("t")
			fresh.RoutingKey = q
			r, err := srv.SendTask(ctx, fresh)
			if err != nil {
				t.Fatal(err)
			}

			w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{q: 1}, Concurrency: 1, Middleware: []errand.Middleware{watch}})
			w.Start()
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				w.Shutdown(sctx)
			})
			if _, err := r.Get(ctx); err != nil {
				t.Fatalf("the fresh task: %v", err)
			}
			// Every message settled: none pending, none in flight.
			for deadline := time.Now().Add(10 * time.Second); ; {
				pending, _ := listed(ctx, br, q, driver.ListPending)
				inflight, _ := listed(ctx, br, q, driver.ListInFlight)
				if len(pending)+len(inflight) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("redeliveries of finished tasks not settled within 10s: %d pending, %d in flight", len(pending), len(inflight))
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[fresh.UUID] != 1 || ran[fresh.UUID] != 1 {
				t.Errorf("the fresh task went through the middleware %d times and ran %d times; want once each", seen[fresh.UUID], ran[fresh.UUID])
			}
			for id, state := range finished {
				if seen[id] != 0 || ran[id] != 0 {
					t.Errorf("redelivery promise broken: a redelivery of a task already %s reached the middleware %d times and ran %d times; want it settled before the middleware, never run", state, seen[id], ran[id])
				}
				st, err := mb.GetState(ctx, id)
				if err != nil || st.State != state {
					t.Errorf("a redelivered task recorded %s is now %+v, %v; want it left %s", state, st, err, state)
				}
			}
		})
	}
}

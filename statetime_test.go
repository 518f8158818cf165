package errand_test

// Issue 31, item 6: a task's times stay in order — CreatedAt ≤ StartedAt ≤
// FinishedAt — when the producer's clock is ahead of the worker's, on the
// path with a driver.Starter and on the portable one (GetState, then
// SetStates), for a task that succeeds and one that fails.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// portableOnly is a backend with errand.Backend's methods alone: no
// driver.Starter, so the worker reads a task's state and then writes.
type portableOnly struct{ errand.Backend }

func TestStateTimesInOrderUnderClockSkew(t *testing.T) {
	for _, path := range []string{"Starter", "Portable"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			br := memorybroker.New(nil)
			mem := memorybackend.New(nil)
			t.Cleanup(func() { br.Close(); mem.Close() })
			var be errand.Backend = mem
			if path == "Portable" {
				be = portableOnly{mem}
			}
			srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			srv.Register("ok", func() (string, error) { return "done", nil })
			srv.Register("bad", func() error { return errand.Permanent(errors.New("no")) })
			w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2})
			w.Start()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				w.Shutdown(ctx)
			})
			ctx := ctxT(t)
			// The producer's clock is an hour ahead of the worker's.
			ahead := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
			for _, name := range []string{"ok", "bad"} {
				sig := errand.NewSignature(name)
				sig.RoutingKey = errand.DefaultQueue
				if err := setState(ctx, mem, &errand.TaskState{TaskUUID: sig.UUID, TaskName: name, State: errand.StatePending, Attempt: 1, CreatedAt: ahead}); err != nil {
					t.Fatal(err)
				}
				body, err := errand.EncodeSignature(sig)
				if err != nil {
					t.Fatal(err)
				}
				if err := br.Publish(ctx, errand.Message{ID: sig.UUID, Queue: errand.DefaultQueue, Body: body, Task: name, TaskAttempt: 1}); err != nil {
					t.Fatal(err)
				}
				srv.Result(sig.UUID).Get(ctx) // SUCCESS or FAILURE
				st, err := mem.GetState(ctx, sig.UUID)
				if err != nil || !st.State.Terminal() {
					t.Fatalf("task %s ended %+v, %v; want SUCCESS or FAILURE", name, st, err)
				}
				if !st.CreatedAt.Equal(ahead) || st.StartedAt.Before(st.CreatedAt) || st.FinishedAt.Before(st.StartedAt) {
					t.Errorf("states promise broken (%s path): task %s created at %s by a producer an hour ahead is stored %s with CreatedAt %s, StartedAt %s, FinishedAt %s; want CreatedAt kept and CreatedAt <= StartedAt <= FinishedAt",
						path, name, ahead.Format(time.RFC3339Nano), st.State, st.CreatedAt.Format(time.RFC3339Nano), st.StartedAt.Format(time.RFC3339Nano), st.FinishedAt.Format(time.RFC3339Nano))
				}
			}
		})
	}
}

package errand_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

func TestWorkerQueuesValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  errand.WorkerConfig
		want string
	}{
		{errand.WorkerConfig{Queues: map[string]int{"a": 0}}, `queue "a" has weight 0`},
		{errand.WorkerConfig{Queues: map[string]int{"a": 1}, QueueConcurrency: map[string]int{"a": -1}}, `queue "a" has cap -1`},
		{errand.WorkerConfig{Queues: map[string]int{"a": 1}, QueueConcurrency: map[string]int{"b": 1}}, `names queue "b", which the worker does not consume`},
		{errand.WorkerConfig{Queues: map[string]int{"": 1}}, `empty queue name`},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
		e := newEnv(t)
		w := e.srv.NewWorker(tc.cfg)
		if err := w.Run(context.Background()); err == nil || !errors.Is(err, w.Err()) {
			t.Errorf("Run with %+v returned %v, want the configuration error at once", tc.cfg, err)
		}
	}
	// Without Queues the worker consumes the server's default queue: a cap
	// may name it, and only it (NewWorker checks, Validate cannot know it).
	e := newEnv(t)
	if w := e.srv.NewWorker(errand.WorkerConfig{QueueConcurrency: map[string]int{"elsewhere": 1}}); w.Err() == nil || !strings.Contains(w.Err().Error(), `names queue "elsewhere"`) {
		t.Errorf("NewWorker with a cap on a queue other than the default one: Err() = %v, want it refused", w.Err())
	}
	if w := e.srv.NewWorker(errand.WorkerConfig{QueueConcurrency: map[string]int{errand.DefaultQueue: 1}}); w.Err() != nil {
		t.Errorf("NewWorker with a cap on the default queue: Err() = %v, want nil", w.Err())
	}
	ok := errand.WorkerConfig{Queues: map[string]int{"a": 2, "b": 1}, QueueConcurrency: map[string]int{"b": 1}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", ok, err)
	}
}

// An empty queue holds no slot: with Concurrency 1, a worker on an empty
// queue weighted 10 and a busy one weighted 1 runs the busy one's tasks
// one after another; the heartbeat lists both queues; pausing one leaves
// the other running.
func TestWorkerQueuesEmptyQueueHoldsNoSlot(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	var mu sync.Mutex
	var ran []string
	e.srv.Register("tag", func(q string) (string, error) {
		mu.Lock()
		ran = append(ran, q)
		mu.Unlock()
		return q, nil
	})
	ctx := ctxT(t)
	logs := &attrRecorder{}
	w := e.start(t, errand.WorkerConfig{Queues: map[string]int{"empty": 10, "busy": 1}, Concurrency: 1, PausePoll: 10 * time.Millisecond, Heartbeat: 20 * time.Millisecond,
		Logger: slog.New(logs)})
	send := func(q string) *errand.AsyncResult {
		sig := errand.NewSignature("tag", q)
		sig.RoutingKey = q
		r, err := e.srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	begin := time.Now()
	var rs []*errand.AsyncResult
	for range 50 {
		rs = append(rs, send("busy"))
	}
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("50 tasks of the busy queue took %v beside an empty queue with Concurrency 1", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, err := e.srv.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ws, func(wi errand.WorkerInfo) bool { return wi.ID == w.ID() })
		if i >= 0 && slices.Equal(ws[i].Queues, []string{"empty", "busy"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Server.Workers does not list the worker with both queues, highest weight first: %+v", ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.srv.Pause(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	// Wait until the worker has seen the pause (its poller logs it).
	for deadline := time.Now().Add(5 * time.Second); ; {
		if m := logs.find("errand: queue paused: not fetching"); m != nil && m["queue"] == "empty" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never reported the queue paused (no \"queue paused\" log line within 5s of Server.Pause)")
		}
		time.Sleep(time.Millisecond)
	}
	paused := send("empty")
	if _, err := send("busy").Get(ctx); err != nil {
		t.Fatalf("the busy queue stopped while the other was paused: %v", err)
	}
	if st, err := paused.State(ctx); err != nil || st.State != errand.StatePending {
		t.Errorf("a task of the paused queue is %+v, %v; want PENDING", st, err)
	}
	if err := e.srv.Resume(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	if _, err := paused.Get(ctx); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

package errand_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// recorder wraps a backend and records every state each task is set to, so
// tests can check the paths against the state graph (driver.ValidPath).
type recorder struct {
	errand.Backend
	mu       sync.Mutex
	paths    map[string][]errand.State
	progress map[string]int // progress writes (STARTED again, with Progress) by task
}

func (r *recorder) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	r.mu.Lock()
	for _, st := range sts {
		p := r.paths[st.TaskUUID]
		if st.State == errand.StateStarted && len(st.Progress) > 0 && len(p) > 0 && p[len(p)-1] == errand.StateStarted {
			if r.progress == nil {
				r.progress = map[string]int{}
			}
			r.progress[st.TaskUUID]++ // SetProgress: the same state, not a step
			continue
		}
		r.paths[st.TaskUUID] = append(p, st.State)
	}
	r.mu.Unlock()
	return r.Backend.SetStates(ctx, sts)
}

// Start records RECEIVED and STARTED for each request the backend wrote,
// so the tests drive the one-call path errand takes on a driver.Starter.
func (r *recorder) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	res := r.Backend.(driver.Starter).Start(ctx, reqs)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range res {
		if x.Err == nil && x.Written {
			id := reqs[i].Started.TaskUUID
			r.paths[id] = append(r.paths[id], reqs[i].Received.State, reqs[i].Started.State)
		}
	}
	return res
}

// SetPendingIfAbsent records PENDING first in each task's path: a PENDING
// the backend drops (a worker recorded the task first) still came before
// every state of the task.
func (r *recorder) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) []error {
	r.mu.Lock()
	for _, st := range sts {
		r.paths[st.TaskUUID] = append([]errand.State{st.State}, r.paths[st.TaskUUID]...)
	}
	r.mu.Unlock()
	return r.Backend.(driver.PendingWriter).SetPendingIfAbsent(ctx, sts)
}

// progressWrites returns how many progress writes task id made.
func (r *recorder) progressWrites(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.progress[id]
}

func (r *recorder) path(id string) []errand.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]errand.State(nil), r.paths[id]...)
}

// checkPaths fails t for every recorded path that is not a path of the
// allowed state graph.
func (r *recorder) checkPaths(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, p := range r.paths {
		if err := driver.ValidPath(p); err != nil {
			t.Errorf("states promise broken: task %s went through %v: %v", id, p, err)
		}
	}
}

type env struct {
	srv    *errand.Server
	broker *memorybroker.Broker
	rec    *recorder
}

// newEnv returns a server over fresh memory drivers; register tasks on it,
// then call start.
func newEnv(t *testing.T) *env {
	t.Helper()
	br := memorybroker.New(nil)
	rec := &recorder{Backend: memorybackend.New(nil), paths: map[string][]errand.State{}}
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rec.checkPaths(t)
		br.Close()
		rec.Close()
	})
	return &env{srv: srv, broker: br, rec: rec}
}

// start runs a worker until the test ends, shutting it down gracefully.
func (e *env) start(t *testing.T, cfg errand.WorkerConfig) *errand.Worker {
	t.Helper()
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = errand.Fibonacci{Unit: time.Millisecond}
	}
	w := e.srv.NewWorker(cfg)
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
	})
	return w
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkNoLeak fails t if goroutines started during the test outlive it.
// It polls with a deadline: goroutines may take a moment to return.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d goroutines before, %d after:\n%s", before, n, buf)
				return
			}
		}
	})
}

// isTaskFailure reports whether err is a task's recorded failure (a
// *TaskError), not a backend error or ctx expiry.
func isTaskFailure(err error) bool {
	var te *errand.TaskError
	return errors.As(err, &te)
}

// setState writes st on be as one SetStates call of one state.
func setState(ctx context.Context, be errand.Backend, st *errand.TaskState) error {
	return errors.Join(be.SetStates(ctx, []*errand.TaskState{st})...)
}

// setAside lists queue's archive on br (a driver.Archiver), newest first,
// with each entry's Error after its Reason where it says more: what the
// tests check a set-aside message's reason against.
func setAside(ctx context.Context, br errand.Broker, queue string) ([]errand.ArchiveEntry, error) {
	a, ok := br.(driver.Archiver)
	if !ok {
		return nil, fmt.Errorf("%T keeps no archive", br)
	}
	es, err := a.Archived(ctx, queue, 0, 1000)
	for i := range es {
		if es[i].Error != "" && es[i].Error != es[i].Reason {
			es[i].Reason += ": " + es[i].Error
		}
	}
	return es, err
}

// listed lists queue's messages in state l on br (a driver.Lister).
func listed(ctx context.Context, br errand.Broker, queue string, l driver.ListState) ([]driver.Listed, error) {
	ls, ok := br.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("%T lists no queues", br)
	}
	return ls.List(ctx, queue, l, 0, 1000)
}

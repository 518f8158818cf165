package errand_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// callCounter wraps the memory backend, keeping its driver.Starter and
// driver.PendingWriter, and counts the calls a task costs it. beforePending,
// if set, runs inside SetPendingIfAbsent before it writes. Each call takes
// delay (a network driver's round trip; the tests using it run in a
// synctest bubble).
type callCounter struct {
	*memorybackend.Backend
	calls         atomic.Int64
	mu            sync.Mutex
	byMethod      map[string]int
	beforePending func()
	delay         time.Duration
}

func (c *callCounter) count(method string) {
	c.calls.Add(1)
	c.mu.Lock()
	c.byMethod[method]++
	c.mu.Unlock()
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
}

func (c *callCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.byMethod {
		out[k] = v
	}
	return out
}

func (c *callCounter) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	c.count("SetStates")
	return c.Backend.SetStates(ctx, sts)
}

func (c *callCounter) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	c.count("GetState")
	return c.Backend.GetState(ctx, id)
}

func (c *callCounter) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	c.count("Start")
	return c.Backend.Start(ctx, reqs)
}

func (c *callCounter) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) []error {
	c.count("SetPendingIfAbsent")
	if c.beforePending != nil {
		c.beforePending()
	}
	return c.Backend.SetPendingIfAbsent(ctx, sts)
}

// TestStartOneCallPerAttempt: on a backend that begins attempts in one call
// (driver.Starter), a successful task costs the worker two backend calls,
// Start and SUCCESS, instead of a read, a RECEIVED+STARTED write and
// SUCCESS; and its states are the same.
func TestStartOneCallPerAttempt(t *testing.T) {
	be := &callCounter{Backend: memorybackend.New(nil), byMethod: map[string]int{}}
	br := memorybroker.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	srv.Register("add", add)
	ctx := ctxT(t)
	const n = 20
	var rs []*errand.AsyncResult
	for i := range n {
		r, err := srv.SendTask(ctx, errand.NewSignature("add", i, 1))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	sent := be.counts()
	if sent["SetPendingIfAbsent"] != n || be.calls.Load() != n {
		t.Fatalf("sending %d tasks under UUIDs errand made cost the backend %v; want one SetPendingIfAbsent each", n, sent)
	}
	be.calls.Store(0)
	be.mu.Lock()
	be.byMethod = map[string]int{}
	be.mu.Unlock()
	// One slot: concurrent slots share Start and SetStates calls
	// (TestSettlementBatching), which would blur the count per task.
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 1})
	w.Start()
	t.Cleanup(func() { w.Shutdown(context.Background()) })
	for i, r := range rs {
		var sum int
		if err := r.GetInto(ctx, &sum); err != nil || sum != i+1 {
			t.Fatalf("task %d: %d, %v", i, sum, err)
		}
	}
	// GetInto reads through the server's backend too: count the worker's
	// calls only.
	got := be.counts()
	delete(got, "GetState")
	if want := map[string]int{"SetStates": n, "Start": n}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d successful tasks cost the worker backend calls %v; want %v (2 per task: Start, then SUCCESS)", n, got, want)
	}
	st, err := rs[0].State(ctx)
	if err != nil || st.State != errand.StateSuccess || st.CreatedAt.IsZero() || st.StartedAt.IsZero() || st.FinishedAt.IsZero() {
		t.Fatalf("state after success = %+v, %v; want SUCCESS with every timestamp", st, err)
	}
}

// heldPublishBroker is a broker whose Publish waits for release (or a
// timeout) before publishing.
type heldPublishBroker struct {
	driver.Broker
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *heldPublishBroker) Publish(ctx context.Context, msgs ...driver.Message) error {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.release:
	case <-time.After(5 * time.Second):
	}
	return b.Broker.Publish(ctx, msgs...)
}

// TestSendTaskPendingBesidePublish: SendTask under a UUID it makes records
// PENDING while the publish is still in flight (one round trip, not two in
// a row), and never over a state a worker wrote first; under a UUID the
// caller chose it records PENDING before publishing, as before.
func TestSendTaskPendingBesidePublish(t *testing.T) {
	be := &callCounter{Backend: memorybackend.New(nil), byMethod: map[string]int{}}
	br := &heldPublishBroker{Broker: memorybroker.New(nil), entered: make(chan struct{}), release: make(chan struct{})}
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx := ctxT(t)

	// The PENDING write waits for the publish to have started; the publish
	// waits for the PENDING to be written. Only concurrent calls finish.
	be.beforePending = func() {
		select {
		case <-br.entered:
		case <-time.After(5 * time.Second):
			t.Errorf("SendTask with a fresh UUID: the PENDING write waited for a publish that never started; want both in flight together")
		}
	}
	var pendingSeen atomic.Bool
	go func() {
		<-br.entered
		// The publish is in flight: PENDING lands without waiting for it.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if be.counts()["SetPendingIfAbsent"] > 0 {
				pendingSeen.Store(true)
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(br.release)
	}()
	start := time.Now()
	r, err := srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !pendingSeen.Load() {
		t.Fatalf("SendTask with a fresh UUID: PENDING was not written while the publish was in flight (after %v)", time.Since(start))
	}
	if st, err := r.State(ctx); err != nil || st.State != errand.StatePending {
		t.Fatalf("after SendTask the task's state is %+v, %v; want PENDING", st, err)
	}

	// A worker that got there first keeps its state: the PENDING is dropped.
	id := errand.NewUUID()
	started := &errand.TaskState{TaskUUID: id, TaskName: "add", State: errand.StateStarted, Attempt: 1, CreatedAt: time.Now()}
	if err := setState(ctx, be.Backend, started); err != nil {
		t.Fatal(err)
	}
	if errs := be.SetPendingIfAbsent(ctx, []*errand.TaskState{{TaskUUID: id, TaskName: "add", State: errand.StatePending}}); errs != nil {
		t.Fatalf("SetPendingIfAbsent over a STARTED task = %v; want nil (leaving a task that has a state is a success)", errs)
	}
	if st, _ := be.Backend.GetState(ctx, id); st == nil || st.State != errand.StateStarted {
		t.Fatalf("a PENDING written after a worker's STARTED replaced it: %+v", st)
	}

	// A caller's UUID: PENDING (SetStates) before the publish.
	be.beforePending = nil
	before := be.counts()
	sig := errand.NewSignature("add", 1, 2)
	sig.UUID = errand.NewUUID()
	if _, err := srv.SendTask(ctx, sig); err != nil {
		t.Fatal(err)
	}
	after := be.counts()
	if after["SetStates"] != before["SetStates"]+1 || after["SetPendingIfAbsent"] != before["SetPendingIfAbsent"] {
		t.Fatalf("SendTask with the caller's UUID called the backend %v (before: %v); want one SetStates (PENDING before the publish), no SetPendingIfAbsent", after, before)
	}
}

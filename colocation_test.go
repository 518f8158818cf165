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

// stateCalls is the memory backend counting the calls errand makes of it
// directly. It keeps the backend's declared location (driver.Located,
// promoted), so the memory broker co-locates with it, and what the
// broker's one-trip calls write goes past these counts.
type stateCalls struct {
	*memorybackend.Backend
	mu    sync.Mutex
	calls map[string]int
}

func (b *stateCalls) count(m string) {
	b.mu.Lock()
	b.calls[m]++
	b.mu.Unlock()
}

func (b *stateCalls) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	b.count("Start")
	return b.Backend.Start(ctx, reqs)
}

func (b *stateCalls) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	b.count("SetStates")
	return b.Backend.SetStates(ctx, sts)
}

func (b *stateCalls) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) []error {
	b.count("SetPendingIfAbsent")
	return b.Backend.SetPendingIfAbsent(ctx, sts)
}

// TestMemoryDriversColocated: the memory broker and backend passed to
// Config as they are co-locate (driver.Colocator): SendTask, the start of
// each attempt and the settle of each quiet success go through the
// broker's one-trip calls, never through the backend's own Start,
// SetStates or SetPendingIfAbsent — for a worker of several queues, and
// for tasks registered beyond the first 64 names.
func TestMemoryDriversColocated(t *testing.T) {
	be := &stateCalls{Backend: memorybackend.New(nil), calls: map[string]int{}}
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const names = 100
	for i := range names {
		if err := srv.Register(fmt.Sprintf("t%03d", i), func(n int) (int, error) { return n, nil }); err != nil {
			t.Fatal(err)
		}
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, Queues: map[string]int{"a": 2, "b": 1}})
	w.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var results []*errand.AsyncResult
	for i := range 20 {
		sig := errand.NewSignature(fmt.Sprintf("t%03d", names-1-i%3), i) // the last names, past the 64th
		sig.RoutingKey = []string{"a", "b"}[i%2]
		r, err := srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatalf("SendTask %d: %v", i, err)
		}
		results = append(results, r)
	}
	for i, r := range results {
		var got int
		if err := r.GetInto(ctx, &got); err != nil || got != i {
			t.Fatalf("task %d: %d, %v; want %d", i, got, err, i)
		}
		st, err := r.State(ctx)
		if err != nil || st.State != errand.StateSuccess || st.StartedAt.IsZero() || st.StartedAt.Before(st.CreatedAt) || st.FinishedAt.Before(st.StartedAt) {
			t.Fatalf("task %d: state %+v, %v; want SUCCESS, its times in order", i, st, err)
		}
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if len(be.calls) != 0 {
		t.Fatalf("20 tasks on a 2-queue worker, of task names beyond the 64th, cost the backend's own calls %v; want none (the memory drivers are co-located: the broker sends, starts and settles each in one call)", be.calls)
	}
}

// flightsBroker is the memory broker declaring MaxAckFlights 1, its
// co-located Settle calls counted (in flight at once, the most seen) and
// held until gate closes.
type flightsBroker struct {
	*memorybroker.Broker
	gate          chan struct{}
	inflight, top atomic.Int32
}

func (b *flightsBroker) Limits() driver.Limits {
	l := b.Broker.Limits()
	l.MaxAckFlights = 1
	return l
}

func (b *flightsBroker) Colocate(be driver.Backend) driver.Colocation {
	c := b.Broker.Colocate(be)
	if c == nil {
		return nil
	}
	return &flightsColocation{Colocation: c, b: b}
}

type flightsColocation struct {
	driver.Colocation
	b *flightsBroker
}

func (c *flightsColocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*driver.TaskState) []error {
	n := c.b.inflight.Add(1)
	defer c.b.inflight.Add(-1)
	for top := c.b.top.Load(); n > top && !c.b.top.CompareAndSwap(top, n); top = c.b.top.Load() {
	}
	select {
	case <-c.b.gate:
	case <-ctx.Done():
	}
	return c.Colocation.Settle(ctx, ds, sts)
}

// TestColocatedSettleFlights: the co-located settles of a queue keep at
// most the broker's Limits().MaxAckFlights calls in flight; the quiet
// successes that come while one is held join the next call.
func TestColocatedSettleFlights(t *testing.T) {
	br := &flightsBroker{Broker: memorybroker.New(nil), gate: make(chan struct{})}
	be := memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var ran atomic.Int32
	if err := srv.Register("t", func(n int) (int, error) { ran.Add(1); return n, nil }); err != nil {
		t.Fatal(err)
	}
	const n = 8
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: n})
	w.Start()
	ctx := ctxT(t)
	var results []*errand.AsyncResult
	for i := range n {
		r, err := srv.SendTask(ctx, errand.NewSignature("t", i))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	// Every task ran, and the first settle is held: the others' settles
	// would be in flight beside it with more flights than one. A second
	// call in flight fails at once; none is waited for a while (a bound,
	// not a timing claim: the assertion holds whenever it ends).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for ran.Load() < n || br.inflight.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s %d of %d tasks ran, %d settles in flight", ran.Load(), n, br.inflight.Load())
		}
		<-tick.C
	}
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end) && br.top.Load() <= 1; {
		<-tick.C
	}
	close(br.gate)
	for i, r := range results {
		var got int
		if err := r.GetInto(ctx, &got); err != nil || got != i {
			t.Fatalf("task %d: %d, %v; want %d", i, got, err, i)
		}
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if top := br.top.Load(); top != 1 {
		t.Fatalf("%d co-located Settle calls of one queue were in flight at once; the broker declares MaxAckFlights 1", top)
	}
}

package errand_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// A concurrency limit errand cannot keep, or that makes no sense, is
// refused when it is given: at Register, or as the worker's Err.
func TestConcurrencyLimitRefused(t *testing.T) {
	srv := flowServer(t, memorybroker.New(nil))
	for _, n := range []int{0, -1} {
		if err := srv.Register("capped", func() error { return nil }, errand.WithConcurrencyLimit(n)); err == nil {
			t.Errorf("Register WithConcurrencyLimit(%d): nil error, want a refused limit", n)
		}
	}
	if err := srv.Register("capped", func() error { return nil }, errand.WithConcurrencyLimit(1)); err != nil {
		t.Errorf("Register WithConcurrencyLimit(1) on the memory broker: %v", err)
	}
	plain := flowServer(t, plainBroker{memorybroker.New(nil)})
	if err := plain.Register("capped", func() error { return nil }, errand.WithConcurrencyLimit(2)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Register WithConcurrencyLimit on a broker without driver.ConcurrencyLimiter: %v, want errors.ErrUnsupported", err)
	}
	if err := plain.NewWorker(errand.WorkerConfig{QueueConcurrencyLimit: map[string]int{errand.DefaultQueue: 2}}).Err(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("QueueConcurrencyLimit on a broker without driver.ConcurrencyLimiter: worker Err %v, want errors.ErrUnsupported", err)
	}
	for _, cfg := range []errand.WorkerConfig{
		{QueueConcurrencyLimit: map[string]int{errand.DefaultQueue: 0}},
		{Queues: map[string]int{"a": 1}, QueueConcurrencyLimit: map[string]int{"b": 1}},
	} {
		if err := srv.NewWorker(cfg).Err(); err == nil {
			t.Errorf("QueueConcurrencyLimit %v (queues %v): worker Err nil, want a refused limit", cfg.QueueConcurrencyLimit, cfg.Queues)
		}
	}
	if err := srv.NewWorker(errand.WorkerConfig{QueueConcurrencyLimit: map[string]int{errand.DefaultQueue: 1}}).Err(); err != nil {
		t.Errorf("QueueConcurrencyLimit of the default queue on the memory broker: worker Err %v", err)
	}
}

// The limits cap the tasks running at once across workers (two here,
// each with room for four), on the co-located memory pair, whose fetch
// would otherwise start the tasks itself: WithConcurrencyLimit a task
// name's, QueueConcurrencyLimit a queue's; a task of another queue is not
// held back by the queue's.
func TestConcurrencyLimitAcrossWorkers(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []errand.TaskOption
		queue map[string]int
	}{
		{"task", []errand.TaskOption{errand.WithConcurrencyLimit(1)}, nil},
		{"queue", nil, map[string]int{"capped": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runCapped(t, c.opts, c.queue)
		})
	}
}

// countingSlots counts the memory broker's concurrency calls, and keeps
// the ttl of an Acquire that was not the worker's Lease.
type countingSlots struct {
	*memorybroker.Broker
	calls  atomic.Int32
	lease  time.Duration
	badTTL atomic.Int64
}

func (b *countingSlots) Acquire(ctx context.Context, holder string, slots []driver.Slot, ttl time.Duration) (bool, error) {
	b.calls.Add(1)
	if ttl != b.lease {
		b.badTTL.Store(int64(ttl))
	}
	return b.Broker.Acquire(ctx, holder, slots, ttl)
}

func (b *countingSlots) Renew(ctx context.Context, holder string, keys []string, ttl time.Duration) error {
	b.calls.Add(1)
	return b.Broker.Renew(ctx, holder, keys, ttl)
}

func (b *countingSlots) Free(ctx context.Context, holder string, keys []string) error {
	b.calls.Add(1)
	return b.Broker.Free(ctx, holder, keys)
}

func runCapped(t *testing.T, opts []errand.TaskOption, queueLimits map[string]int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const lease = time.Second
	broker, backend := &countingSlots{Broker: memorybroker.New(nil), lease: lease}, memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend, DefaultQueue: "capped"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var running, most atomic.Int32
	work := func(ctx context.Context) error {
		now := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		timer := time.NewTimer(30 * time.Millisecond) // the task's work
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := srv.Register("work", work, opts...); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register("other", work); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{"capped": 1, "free": 1}, Concurrency: 4,
			QueueConcurrencyLimit: queueLimits, Lease: lease})
		if err := w.Err(); err != nil {
			t.Fatal(err)
		}
		w.Start()
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Shutdown(sctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
	var rs []*errand.AsyncResult
	for range 5 {
		r, err := srv.SendTask(ctx, errand.NewSignature("work"))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for i, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("task %d: %v, want success", i+1, err)
		}
		if st, err := r.State(ctx); err != nil || st.Attempt != 1 {
			t.Errorf("task %d: state %+v, %v; want attempt 1 (waiting for a slot counts no attempt)", i+1, st, err)
		}
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d tasks ran at once on two workers of 4; the limit is 1", m)
	}
	if ttl := time.Duration(broker.badTTL.Load()); ttl != 0 {
		t.Errorf("slots were taken for %v, want the worker's Lease %v (a killed worker's slots come back with its deliveries)", ttl, lease)
	}
	// Another task on another queue takes no slot: it runs side by side,
	// and costs no call of the limiter.
	most.Store(0)
	broker.calls.Store(0)
	var free []*errand.AsyncResult
	for range 4 {
		sig := errand.NewSignature("other")
		sig.RoutingKey = "free"
		r, err := srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		free = append(free, r)
	}
	for i, r := range free {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("task %d of queue free: %v, want success", i+1, err)
		}
	}
	if n := broker.calls.Load(); n != 0 {
		t.Errorf("4 tasks without a limit, on a queue without one, made %d calls of the broker's concurrency limiter; want none", n)
	}
	t.Logf("queue free: at most %d at once", most.Load())
}

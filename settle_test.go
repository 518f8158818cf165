package errand_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// roundTrip is the time each call of the slow drivers below takes: a
// network driver's round trip, on the synctest bubble's clock.
const roundTrip = time.Millisecond

// calls counts a driver's calls by method.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(method string) { c.addSlow(method, roundTrip) }

// addSlow counts a call of method, which takes d.
func (c *calls) addSlow(method string, d time.Duration) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[method]++
	c.mu.Unlock()
	time.Sleep(d)
}

func (c *calls) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *calls) reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

// slowBackend is the memory backend (a driver.Starter, StateBatcher and
// PendingWriter) whose every call takes roundTrip and is counted.
type slowBackend struct {
	*memorybackend.Backend
	calls
}

func (b *slowBackend) SetState(ctx context.Context, st *errand.TaskState) error {
	b.add("SetState")
	return b.Backend.SetState(ctx, st)
}

func (b *slowBackend) SetStates(ctx context.Context, sts []*errand.TaskState) error {
	b.add("SetStates")
	return b.Backend.SetStates(ctx, sts)
}

func (b *slowBackend) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	b.add("GetState")
	return b.Backend.GetState(ctx, id)
}

func (b *slowBackend) Start(ctx context.Context, reqs []driver.StartRequest) ([]driver.StartResult, error) {
	b.add("Start")
	return b.Backend.Start(ctx, reqs)
}

func (b *slowBackend) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) error {
	b.add("SetPendingIfAbsent")
	return b.Backend.SetPendingIfAbsent(ctx, sts)
}

// slowBroker is the memory broker (a driver.BatchAcker) whose acks take
// three round trips (a heavier call than the backend's: with four ack
// flights, ten slots then keep more acks than flights in the air) and are
// counted.
type slowBroker struct {
	*memorybroker.Broker
	calls
}

func (b *slowBroker) Ack(ctx context.Context, d *driver.Delivery) error {
	b.addSlow("Ack", 3*roundTrip)
	return b.Broker.Ack(ctx, d)
}

func (b *slowBroker) AckBatch(ctx context.Context, ds []*driver.Delivery) []error {
	b.addSlow("AckBatch", 3*roundTrip)
	return b.Broker.AckBatch(ctx, ds)
}

// TestSettlementBatching: with 10 worker slots on drivers that take
// batches, the starts, SUCCESS writes and acks of concurrent tasks share
// driver calls: fewer calls of each kind than tasks, every task still run
// once and recorded SUCCESS.
func TestSettlementBatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &slowBackend{Backend: memorybackend.New(nil)}
		br := &slowBroker{Broker: memorybroker.New(nil)}
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		var mu sync.Mutex
		ran := map[int]int{}
		srv.Register("note", func(i int) (int, error) {
			mu.Lock()
			ran[i]++
			mu.Unlock()
			return i, nil
		})
		ctx := context.Background()
		const n = 100
		var rs []*errand.AsyncResult
		for i := range n {
			r, err := srv.SendTask(ctx, errand.NewSignature("note", i))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		be.reset()
		w := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
		w.Start()
		for i, r := range rs {
			var got int
			if err := r.GetInto(ctx, &got); err != nil || got != i {
				t.Fatalf("task %d: %d, %v", i, got, err)
			}
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if ran[i] != 1 {
				t.Fatalf("task %d ran %d times; want once", i, ran[i])
			}
		}
		bc, kc := be.get(), br.get()
		t.Logf("%d tasks, 10 slots: backend calls %v, broker acks %v", n, bc, kc)
		if bc["Start"] >= n || bc["Start"] == 0 {
			t.Errorf("%d tasks on 10 slots made %d Start calls; want their starts to share calls (fewer than tasks)", n, bc["Start"])
		}
		if w := bc["SetState"] + bc["SetStates"]; w >= n || bc["SetStates"] == 0 {
			t.Errorf("%d tasks on 10 slots made %d SetState and %d SetStates calls; want their SUCCESS writes to share SetStates calls (fewer than tasks)", n, bc["SetState"], bc["SetStates"])
		}
		if a := kc["Ack"] + kc["AckBatch"]; a >= n || kc["Ack"] != 0 {
			t.Errorf("%d tasks on 10 slots made %d Ack and %d AckBatch calls; want acks in shared AckBatch calls (fewer than tasks)", n, kc["Ack"], kc["AckBatch"])
		}
	})
}

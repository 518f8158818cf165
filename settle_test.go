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

// roundTrip is the time each backend call takes in TestSettlementBatching:
// a network driver's round trip, on the synctest bubble's clock.
const roundTrip = time.Millisecond

// slowBroker is the memory broker whose Ack calls are
// counted and take three round trips (a heavier call than the backend's:
// with four ack flights, ten slots then keep more acks than flights in
// the air).
type slowBroker struct {
	*memorybroker.Broker
	mu   sync.Mutex
	acks map[string]int
}

func (b *slowBroker) count(method string) {
	b.mu.Lock()
	b.acks[method]++
	b.mu.Unlock()
	time.Sleep(3 * roundTrip)
}

func (b *slowBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	b.count("Ack")
	return b.Broker.Ack(ctx, ds)
}

// TestSettlementBatching: with 10 worker slots on drivers that take
// batches, the starts, SUCCESS writes and acks of concurrent tasks share
// driver calls: fewer calls of each kind than tasks, every task still run
// once and recorded SUCCESS.
func TestSettlementBatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &callCounter{Backend: memorybackend.New(nil), byMethod: map[string]int{}, delay: roundTrip}
		br := &slowBroker{Broker: memorybroker.New(nil), acks: map[string]int{}}
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
		be.mu.Lock()
		be.byMethod = map[string]int{}
		be.mu.Unlock()
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
		bc := be.counts()
		br.mu.Lock()
		kc := br.acks
		br.mu.Unlock()
		t.Logf("%d tasks, 10 slots: backend calls %v, broker acks %v", n, bc, kc)
		if bc["Start"] >= n || bc["Start"] == 0 {
			t.Errorf("%d tasks on 10 slots made %d Start calls; want their starts to share calls (fewer than tasks)", n, bc["Start"])
		}
		if w := bc["SetStates"]; w >= n || w == 0 {
			t.Errorf("%d tasks on 10 slots made %d SetStates calls; want their SUCCESS writes to share SetStates calls (fewer than tasks)", n, w)
		}
		if a := kc["Ack"]; a >= n || a == 0 {
			t.Errorf("%d tasks on 10 slots made %d Ack calls; want acks in shared Ack calls (fewer than tasks)", n, a)
		}
	})
}

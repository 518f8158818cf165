package errand_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// gatedBroker is the memory broker whose acks wait until gate is closed.
type gatedBroker struct {
	*memorybroker.Broker
	gate chan struct{}
}

func (b *gatedBroker) wait(ctx context.Context) error {
	select {
	case <-b.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *gatedBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if err := b.wait(ctx); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return b.Broker.Ack(ctx, ds)
}

// TestSettlingBesideSlots: once a task's function returns, its slot is
// free for the next task while its delivery settles (WorkerConfig.Concurrency),
// and at most Concurrency deliveries settle at once: with one slot and
// acks held back, a second task runs while the first waits for its ack, and
// a third is not even fetched while the second waits for a settling place.
// Functions never run more than Concurrency at once, and every task runs
// once when the acks come through.
func TestSettlingBesideSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := &gatedBroker{Broker: memorybroker.New(nil), gate: make(chan struct{})}
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: memorybackend.New(nil)})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		var mu sync.Mutex
		ran, running, most := map[int]int{}, 0, 0
		srv.Register("note", func(i int) error {
			mu.Lock()
			ran[i]++
			running++
			most = max(most, running)
			mu.Unlock()
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		})
		ctx := context.Background()
		const n = 3
		var rs []*errand.AsyncResult
		for i := range n {
			r, err := srv.SendTask(ctx, errand.NewSignature("note", i))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		w := srv.NewWorker(errand.WorkerConfig{Concurrency: 1})
		w.Start()
		synctest.Wait()
		mu.Lock()
		got := len(ran)
		mu.Unlock()
		if got != 2 {
			t.Errorf("Concurrency 1, acks held back: %d tasks ran; want 2 (the slot freed once the first function returned, while its delivery settles; the second then waits for the one settling place, holding its slot, so the third is not fetched)", got)
		}
		close(br.gate)
		for i, r := range rs {
			if _, err := r.Get(ctx); err != nil {
				t.Fatalf("task %d: %v", i, err)
			}
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown after every task settled: %v", err)
		}
		for i := range n {
			if ran[i] != 1 {
				t.Errorf("task %d ran %d times; want once", i, ran[i])
			}
		}
		if most > 1 {
			t.Errorf("Concurrency 1: %d functions ran at once; Concurrency bounds running functions", most)
		}
	})
}

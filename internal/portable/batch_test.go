package portable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// The coalescer's own tests are in internal/coalesce; these test what
// the portable layer builds on it: per-item answers under the batch
// convention of package driver.

// stateBatcher is a driver.Backend whose SetStates refuses one state
// (TaskUUID "bad") and writes the others, answering per state.
type stateBatcher struct {
	driver.Backend
	mu      sync.Mutex
	batches [][]string
	written []string
}

func (b *stateBatcher) SetStates(_ context.Context, sts []*driver.TaskState) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	errs := make([]error, len(sts))
	for i, st := range sts {
		ids = append(ids, st.TaskUUID)
		if st.TaskUUID == "bad" {
			errs[i] = errors.New("cannot encode a result")
			continue
		}
		b.written = append(b.written, st.TaskUUID)
	}
	b.batches = append(b.batches, ids)
	return errs
}

func (b *stateBatcher) Close() error { return nil }

// TestStateWritesErrorsPerTask: one state the backend refuses fails only
// its own task, in one SetStates call, without any write again; a lone
// state is a SetStates of one.
func TestStateWritesErrorsPerTask(t *testing.T) {
	drv := &stateBatcher{}
	be := WrapBackend(drv)
	defer be.Close()
	if err := be.SetState(t.Context(), &driver.TaskState{TaskUUID: "lone"}); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(drv.batches, [][]string{{"lone"}}, slices.Equal) {
		t.Fatalf("a lone state went as SetStates calls %v; want one call of one", drv.batches)
	}
	errs := be.SetStates(t.Context(), []*driver.TaskState{{TaskUUID: "a"}, {TaskUUID: "bad"}, {TaskUUID: "c"}})
	if len(errs) != 3 || errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("a batch with one refused state answered %v; want an error for that state alone", errs)
	}
	if len(drv.batches) != 2 || !slices.Equal(drv.written, []string{"lone", "a", "c"}) {
		t.Fatalf("after the batch: calls %v, written %v; want one call more, a and c written", drv.batches, drv.written)
	}
	if err := be.SetAll(t.Context(), []*driver.TaskState{{TaskUUID: "x"}, {TaskUUID: "bad", State: driver.StateSuccess}}); err == nil || !strings.Contains(err.Error(), "task bad: set SUCCESS") {
		t.Fatalf("setStates with a refused state = %v; want the refused state's error, naming its task and state", err)
	}
}

// wrongLength is a broker and backend whose batch calls answer one error
// fewer than items (and a Start one result fewer), breaking the batch
// convention.
type wrongLength struct {
	driver.Broker
	driver.Backend
}

func (wrongLength) Ack(_ context.Context, ds []*driver.Delivery) []error {
	return make([]error, len(ds)-1)
}

func (wrongLength) SetStates(_ context.Context, sts []*driver.TaskState) []error {
	return make([]error, len(sts)+1)
}

func (wrongLength) Start(_ context.Context, reqs []driver.StartRequest) []driver.StartResult {
	return make([]driver.StartResult, len(reqs)-1)
}

func (wrongLength) Close() error { return nil }

// TestBatchAnswerOfWrongLength: an answer of another length than the
// batch is the driver's bug, reported for every item, however many
// succeeded.
func TestBatchAnswerOfWrongLength(t *testing.T) {
	drv := wrongLength{}
	br, be := WrapBroker(drv), WrapBackend(drv)
	defer br.Close()
	defer be.Close()
	ctx := t.Context()
	for i, err := range br.Ack(ctx, []*driver.Delivery{{}, {}}) {
		if err == nil || !strings.Contains(err.Error(), "batch convention") {
			t.Errorf("Ack answering 1 error for 2 deliveries: delivery %d got %v; want the convention broken, for every delivery", i, err)
		}
	}
	if err := br.AckOne(ctx, &driver.Delivery{}); err == nil || !strings.Contains(err.Error(), "batch convention") {
		t.Errorf("a lone ack answered no error at all: got %v; want the convention broken", err)
	}
	errs := be.SetStates(ctx, []*driver.TaskState{{}, {}})
	if len(errs) != 2 || errs[0] == nil || errs[1] == nil {
		t.Errorf("SetStates answering 3 errors for 2 states: %v; want the convention broken, for both", errs)
	}
	if _, err := be.StartAttempt(ctx, driver.StartRequest{Started: &driver.TaskState{}}); err == nil || !strings.Contains(err.Error(), "batch convention") {
		t.Errorf("Start answering no result for one request: %v; want the convention broken", err)
	}
}

// TestBatchCallAfterClose: after Close, a batch call of the wrapper
// answers driver.ErrClosed for every item without reaching the driver.
func TestBatchCallAfterClose(t *testing.T) {
	drv := &stateBatcher{}
	be := WrapBackend(drv)
	be.Close()
	errs := be.SetStates(t.Context(), []*driver.TaskState{{TaskUUID: "a"}, {TaskUUID: "b"}})
	if len(errs) != 2 || !errors.Is(errs[0], driver.ErrClosed) || !errors.Is(errs[1], driver.ErrClosed) || len(drv.batches) != 0 {
		t.Fatalf("SetStates after Close = %v, driver calls %v; want driver.ErrClosed for each state, no call", errs, drv.batches)
	}
	if err := be.SetState(t.Context(), &driver.TaskState{TaskUUID: "c"}); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("setState after Close = %v; want driver.ErrClosed", err)
	}
}

// batchingBroker is a memory broker whose Ack is gated and recorded.
type batchingBroker struct {
	*memorybroker.Broker
	limit   int
	flights int           // its MaxAckFlights
	gate    chan struct{} // each Ack waits for it to close

	mu      sync.Mutex
	batches []int
}

func (b *batchingBroker) Limits() driver.Limits {
	return driver.Limits{MaxAckBatch: b.limit, MaxAckFlights: b.flights}
}

func (b *batchingBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	b.mu.Lock()
	b.batches = append(b.batches, len(ds))
	b.mu.Unlock()
	select {
	case <-b.gate:
	case <-ctx.Done():
	}
	return b.Broker.Ack(ctx, ds)
}

// TestAcksCoalesceIntoBatches: concurrent acks of one queue go in Ack
// calls of at most the broker's MaxAckBatch, with at most its
// MaxAckFlights (else AckFlights) in flight, the rest joining the next.
func TestAcksCoalesceIntoBatches(t *testing.T) {
	for _, c := range []struct{ limit, flights int }{{0, 0}, {5, 0}, {0, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("limit%d_flights%d", c.limit, c.flights), func(t *testing.T) {
			ctx := t.Context()
			limit, flights := c.limit, c.flights
			if flights == 0 {
				flights = AckFlights
			}
			drv := &batchingBroker{Broker: memorybroker.New(nil), limit: limit, flights: c.flights, gate: make(chan struct{})}
			b := WrapBroker(drv)
			defer b.Close()
			const n = 40
			for i := range n {
				if err := b.Publish(ctx, driver.Message{ID: fmt.Sprint(i), Queue: "q", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}
			ds, err := b.Fetch(ctx, "q", n, time.Minute)
			if err != nil || len(ds) != n {
				t.Fatalf("Fetch = %d, %v", len(ds), err)
			}
			errs := make(chan error, n)
			var calling atomic.Int32
			for _, d := range ds {
				go func() { calling.Add(1); errs <- b.AckOne(ctx, d) }()
			}
			// While the first calls are held (every flight busy), the rest
			// queue up behind them.
			waitFor(t, "every flight busy and every ack queued", func() bool {
				drv.mu.Lock()
				defer drv.mu.Unlock()
				return len(drv.batches) == flights && calling.Load() == n && b.Acks.Queued() == n-flights
			})
			close(drv.gate)
			for range n {
				if err := <-errs; err != nil {
					t.Fatalf("Ack: %v", err)
				}
			}
			drv.mu.Lock()
			batches := append([]int(nil), drv.batches...)
			drv.mu.Unlock()
			total, biggest := 0, 0
			for _, s := range batches {
				total += s
				biggest = max(biggest, s)
				if limit > 0 && s > limit {
					t.Errorf("an Ack call carried %d deliveries; the driver's MaxAckBatch is %d", s, limit)
				}
			}
			if total != n {
				t.Fatalf("Ack calls carried %d deliveries in all (%v), want %d", total, batches, n)
			}
			if len(batches) >= n || biggest < 2 {
				t.Fatalf("%d concurrent acks made %d Ack calls %v; want them coalesced", n, len(batches), batches)
			}
			if st, _ := drv.Broker.Stats(ctx, "q"); st.InFlight != 0 || st.Pending != 0 {
				t.Fatalf("after every ack the queue holds %+v, want nothing", st)
			}
		})
	}
}

// waitFor polls cond until it holds, failing t after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		<-tick.C
	}
}

package portable

import (
	"context"
	"fmt"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/coalesce"
)

// Settlement batching: settlement is batch-shaped in package driver (Ack,
// SetStates, Starter.Start take a batch and answer per item), and the
// portable layer joins the concurrent calls of many worker slots into
// those batch calls with a coalescer (internal/coalesce), without a
// waiting window. A call that finds fewer than n calls of its kind (and
// key) in flight is sent at once, alone, on its caller's goroutine; one
// that finds them all busy waits for the next call, which carries every
// request queued meanwhile (up to a limit) and is sent by the first flight
// to come back. A lone task never waits for a timer; under load, batches
// form by themselves, and the busier the driver, the bigger they get.
//
// It carries:
//
//   - acks, per queue: AckFlightsOf (Limits().MaxAckFlights, else
//     AckFlights) in flight, Limits().MaxAckBatch a call;
//   - attempt starts (driver.Starter) and single state writes, SUCCESS,
//     FAILURE, RETRY and PENDING among them (one SetStates of many tasks'
//     states): BackendFlights in flight of each, MaxBackendBatch a call.
//
// Every caller waits for its own request's outcome, so a caller's next
// step (a task's ack after its SUCCESS, its SUCCESS after its STARTED)
// still follows it, and the states of one task stay in order. Each
// answer is checked against the batch convention of driver/doc.go
// (CheckBatch), so one item the driver refuses fails its own caller alone.
// Closing the wrapper closes its coalescers, which wait for the calls they
// have in flight.

const (
	// AckFlights is how many Ack calls of one queue may be in flight
	// when the broker declares no Limits().MaxAckFlights.
	AckFlights = 4
	// BackendFlights is how many Start calls, and how many state writes,
	// may be in flight. Two, not four: with ten worker slots, four
	// flights of each of the three settling calls (start, state, ack)
	// leave almost every call alone; with two, the Redis drain of ten
	// slots made 2.8 server reads a task instead of 3.4 at the same
	// throughput (docs/benchmarks.md's machine; with fifty slots both
	// coalesce well).
	BackendFlights = 2
	// MaxBackendBatch is the most requests one backend batch call carries.
	MaxBackendBatch = 64
)

// CheckBatch checks drv's answer errs to a batch call of n items (its
// method) under the batch convention of driver/doc.go: it returns nil when
// every item succeeded, else exactly n errors. An answer of another length
// is the driver's bug, reported for every item.
func CheckBatch(drv any, method string, n int, errs []error) []error {
	if errs == nil {
		return nil
	}
	if len(errs) != n {
		return driver.BatchErrors(n, fmt.Errorf("errand: %T broke the batch convention of package driver: %s answered %d errors for %d items", drv, method, len(errs), n))
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// mapBatch maps each error of a checked answer with after (nil stays nil).
func mapBatch(ctx context.Context, after func(context.Context, error) error, errs []error) []error {
	for i, err := range errs {
		errs[i] = after(ctx, err)
	}
	return errs
}

// AckFlightsOf is how many Ack calls (and co-located settles) of one
// queue may be in flight for a broker of limits l: its MaxAckFlights, or
// AckFlights when it declares none.
func AckFlightsOf(l driver.Limits) int {
	if l.MaxAckFlights > 0 {
		return l.MaxAckFlights
	}
	return AckFlights
}

// newAckCoalescer joins acks per queue into Ack calls of b's driver.
func (b *Broker) newAckCoalescer() *coalesce.Coalescer[*driver.Delivery, struct{}] {
	return coalesce.New(coalesce.Config[*driver.Delivery, struct{}]{
		Flights: AckFlightsOf(b.limits), Limit: b.limits.MaxAckBatch, Closed: driver.ErrClosed,
		Run: func(ctx context.Context, _ string, ds []*driver.Delivery, _ []struct{}, errs []error) {
			copy(errs, CheckBatch(b.Drv, "Ack", len(ds), b.Drv.Ack(ctx, ds)))
		},
	})
}

// newStateCoalescer joins single state writes into SetStates calls of b's
// driver. One state the driver refuses fails its own task alone.
func (b *Backend) newStateCoalescer() *coalesce.Coalescer[*driver.TaskState, struct{}] {
	return coalesce.New(coalesce.Config[*driver.TaskState, struct{}]{
		Flights: BackendFlights, Limit: MaxBackendBatch, Closed: driver.ErrClosed,
		Run: func(ctx context.Context, _ string, sts []*driver.TaskState, _ []struct{}, errs []error) {
			copy(errs, CheckBatch(b.Drv, "SetStates", len(sts), b.Drv.SetStates(ctx, sts)))
		},
	})
}

// newStartCoalescer joins attempt starts into Start calls, checking each
// answer against the starter's contract: one result per request (else
// every request fails: the driver's bug), each written exactly when the
// starter's table allows it (else that request fails). A request the
// driver answers with an error fails alone.
func (b *Backend) newStartCoalescer() *coalesce.Coalescer[driver.StartRequest, driver.StartResult] {
	return coalesce.New(coalesce.Config[driver.StartRequest, driver.StartResult]{
		Flights: BackendFlights, Limit: MaxBackendBatch, Closed: driver.ErrClosed,
		Run: func(ctx context.Context, _ string, reqs []driver.StartRequest, out []driver.StartResult, errs []error) {
			res := b.Starter.Start(ctx, reqs)
			if len(res) != len(reqs) {
				err := fmt.Errorf("errand: backend %T broke the batch convention of package driver: Start answered %d results for %d requests", b.Drv, len(res), len(reqs))
				copy(errs, driver.BatchErrors(len(reqs), err))
				return
			}
			for i, r := range res {
				switch {
				case r.Err != nil:
					errs[i] = r.Err
				case r.Written != reqs[i].Allows(r.Prev):
					errs[i] = fmt.Errorf("errand: backend %T broke the driver.Starter contract: task %s with previous state %s (attempt %d): written %v, want %v",
						b.Drv, reqs[i].Started.TaskUUID, StateName(r.Prev), AttemptOf(r.Prev), r.Written, !r.Written)
				default:
					out[i] = r
				}
			}
		},
	})
}

func StateName(st *driver.TaskState) driver.State {
	if st == nil {
		return "none"
	}
	return st.State
}

func AttemptOf(st *driver.TaskState) int {
	if st == nil {
		return 0
	}
	return st.Attempt
}

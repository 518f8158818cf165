package errand

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/coalesce"
)

// One round trip out, where the broker can carry the backend's writes
// (driver.SettleCarrier: errand's Redis broker and Redis backend on one
// Redis node): a task that succeeded and that nothing follows — no
// OnSuccess callbacks, no chord group to complete, no unique key to free
// (quiet) — records SUCCESS and is acked in one call of the carrier,
// joined with the settles of concurrent slots of its queue as acks are
// joined (batch.go), instead of a SetStates and then an Ack. The order
// of the two-call path is kept: the state is written before the message
// leaves the queue, so a redelivery (after a lost lease) finds SUCCESS
// and runs nothing again. Every other outcome, and every pair without a
// carrier, takes the two-call path.

// carriedSettle is one delivery to ack with its task's final state.
type carriedSettle struct {
	d  *driver.Delivery
	st *TaskState
}

// newSettleCarrier returns the coalescer of carried settles over carry
// (nil: none, and no coalescer). Server.Close closes it.
func (s *Server) newSettleCarrier(carry driver.SettleFunc) *coalesce.Coalescer[carriedSettle, struct{}] {
	if carry == nil {
		return nil
	}
	return coalesce.New(coalesce.Config[carriedSettle, struct{}]{
		Flights: ackFlights, Limit: s.broker.limits.MaxAckBatch, AnswerTaken: true, Closed: ErrClosed,
		Run: func(ctx context.Context, _ string, reqs []carriedSettle, _ []struct{}, errs []error) {
			var ds []*driver.Delivery
			var sts []*TaskState
			if n := len(reqs); n <= len(settleBufs{}.ds) {
				b := new(settleBufs) // both slices in one allocation
				ds, sts = b.ds[:n:n], b.sts[:n:n]
			} else {
				ds, sts = make([]*driver.Delivery, n), make([]*TaskState, n)
			}
			for i, r := range reqs {
				ds[i], sts[i] = r.d, r.st
			}
			copy(errs, checkBatch(s.broker.drv, "SettleFunc", len(ds), carry(ctx, ds, sts)))
		},
	})
}

// settleBufs holds the slices of a carried settle of up to 8 deliveries.
type settleBufs struct {
	ds  [8]*driver.Delivery
	sts [8]*TaskState
}

// quiet reports whether nothing follows sig's success but its ack: no
// OnSuccess callbacks, no chord group to complete, no unique key to free
// (afterSuccess would call nothing).
func quiet(sig *Signature) bool {
	return len(sig.OnSuccess) == 0 && sig.UniqueKey == "" && (sig.GroupUUID == "" || sig.ChordCallback == nil)
}

// settleCarried records dv.carried, the task's final state st, and acks
// its delivery d in one carried call. A lost lease
// is reported (st was written: the redelivery finds it); any other error
// leaves d unacked, its state perhaps unwritten, and gives it back after
// ErrorBackoff, as a failed SUCCESS write does on the two-call path.
func (dv *delivery) settleCarried(ctx context.Context) {
	w, d, st, attrs := dv.w, dv.d, dv.carried, dv.attrs
	s := w.srv
	err := s.broker.before(ctx)
	if err == nil {
		err = s.backend.before(ctx)
	}
	if err == nil {
		_, err = s.settled.Do(ctx, d.Queue, carriedSettle{d, st})
		err = s.broker.after(ctx, err)
	}
	switch {
	case err == nil:
	case errors.Is(err, driver.ErrLeaseLost):
		w.report(err, "errand: ack", attrs()...)
	default:
		w.report(fmt.Errorf("errand: task %s (%s): set SUCCESS and ack: %w", st.TaskName, st.TaskUUID, err), "errand: task requeued after an error", attrs()...)
		if err := s.broker.Release(ctx, d, time.Now().Add(w.cfg.ErrorBackoff)); err != nil {
			w.report(err, "errand: release", attrs()...)
		}
	}
}

package errand

import (
	"context"
	"fmt"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/coalesce"
)

// Fewer round trips on the hot path, where the backend can:
//
//   - a worker begins an attempt with one driver.Starter call, which reads
//     the task's previous state and writes RECEIVED and STARTED if that
//     state allows it, instead of a GetState and then a SetStates;
//   - SendTask, when it made the task's UUID itself, records PENDING with
//     driver.PendingWriter (never over a state a worker already wrote) at
//     the same time as it publishes, instead of before, or in the publish's
//     own round trip where the broker and the backend are co-located
//     (driver.Colocator; colocation.go).
//
// Backends without these abilities take the two-call paths, with the same
// outcome. Concurrent starts of many worker slots share Start calls
// (batch.go).

// start begins the attempt of req (driver.Starter), in one Start call
// with the requests of concurrent callers (batch.go), and checks the
// driver's answer.
func (b *backend) start(ctx context.Context, req driver.StartRequest) (driver.StartResult, error) {
	if err := b.before(ctx); err != nil {
		return driver.StartResult{}, err
	}
	res, err := b.starts.Do(ctx, "", req)
	return res, b.after(ctx, err)
}

// newStartCoalescer joins attempt starts into Start calls, checking each
// answer against the starter's contract: one result per request (else
// every request fails: the driver's bug), each written exactly when the
// starter's table allows it (else that request fails). A request the
// driver answers with an error fails alone.
func (b *backend) newStartCoalescer() *coalesce.Coalescer[driver.StartRequest, driver.StartResult] {
	return coalesce.New(coalesce.Config[driver.StartRequest, driver.StartResult]{
		Flights: backendFlights, Limit: maxBackendBatch, Closed: ErrClosed,
		Run: func(ctx context.Context, _ string, reqs []driver.StartRequest, out []driver.StartResult, errs []error) {
			res := b.starter.Start(ctx, reqs)
			if len(res) != len(reqs) {
				err := fmt.Errorf("errand: backend %T broke the batch convention of package driver: Start answered %d results for %d requests", b.drv, len(res), len(reqs))
				copy(errs, driver.BatchErrors(len(reqs), err))
				return
			}
			for i, r := range res {
				switch {
				case r.Err != nil:
					errs[i] = r.Err
				case r.Written != reqs[i].Allows(r.Prev):
					errs[i] = fmt.Errorf("errand: backend %T broke the driver.Starter contract: task %s with previous state %s (attempt %d): written %v, want %v",
						b.drv, reqs[i].Started.TaskUUID, stateName(r.Prev), attemptOf(r.Prev), r.Written, !r.Written)
				default:
					out[i] = r
				}
			}
		},
	})
}

func stateName(st *TaskState) State {
	if st == nil {
		return "none"
	}
	return st.State
}

func attemptOf(st *TaskState) int {
	if st == nil {
		return 0
	}
	return st.Attempt
}

// setPendingIfAbsent records st (PENDING) where its task has no state
// (driver.PendingWriter).
func (b *backend) setPendingIfAbsent(ctx context.Context, st *TaskState) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	errs := checkBatch(b.drv, "SetPendingIfAbsent", 1, b.pending.SetPendingIfAbsent(ctx, []*TaskState{st}))
	if errs == nil {
		return nil
	}
	return b.after(ctx, errs[0])
}

// begin records RECEIVED then STARTED for an attempt of sig in one
// driver.Starter call, which also reads the task's previous state. begun
// says the attempt may run; otherwise outcome and err say how to settle d,
// exactly as process decides from a GetState (resume). st and started get
// the previous state's CreatedAt, and started a StartedAt no earlier than
// it, as the starter wrote them.
func (w *Worker) begin(ctx context.Context, sig *Signature, d *driver.Delivery, st, started *TaskState) (begun bool, outcome settle, err error) {
	req := driver.StartRequest{Received: st, Started: started, FirstDelivery: d.Attempt == 1}
	res, err := w.srv.backend.start(ctx, req)
	if err != nil {
		return false, requeue, fmt.Errorf("errand: task %s (%s): set RECEIVED, STARTED: %w", sig.Name, sig.UUID, err)
	}
	prev := res.Prev
	if res.Written {
		if prev != nil { // as the starter wrote them
			st.CreatedAt, started.CreatedAt = prev.CreatedAt, prev.CreatedAt
			started.StartedAt = notBefore(started.StartedAt, prev.CreatedAt)
		}
		return true, ack, nil
	}
	done, outcome, err := w.resume(ctx, sig, prev, d)
	if !done { // the wrapper checked the table: not reached
		return false, requeue, fmt.Errorf("errand: task %s (%s): the backend did not start a task in state %s", sig.Name, sig.UUID, prev.State)
	}
	return false, outcome, err
}

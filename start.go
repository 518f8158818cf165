package errand

import (
	"context"
	"fmt"

	"github.com/errand-go/errand/driver"
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
// Backends without these capabilities take the two-call paths, with the same
// outcome. Concurrent starts of many worker slots share Start calls
// (internal/portable/batch.go).

// begin records RECEIVED then STARTED for an attempt of sig in one
// driver.Starter call, which also reads the task's previous state. begun
// says the attempt may run; otherwise outcome and err say how to settle d,
// exactly as process decides from a GetState (resume). st and started get
// the previous state's CreatedAt, and started a StartedAt no earlier than
// it, as the starter wrote them.
func (w *Worker) begin(ctx context.Context, sig *Signature, d *driver.Delivery, st, started *TaskState) (begun bool, outcome settle, err error) {
	req := driver.StartRequest{Received: st, Started: started, FirstDelivery: d.Attempt == 1}
	res, err := w.srv.backend.StartAttempt(ctx, req)
	if err != nil {
		return false, settleRequeue, fmt.Errorf("errand: task %s (%s): set RECEIVED, STARTED: %w", sig.Name, sig.UUID, err)
	}
	prev := res.Prev
	if res.Written {
		if prev != nil { // as the starter wrote them
			st.CreatedAt, started.CreatedAt = prev.CreatedAt, prev.CreatedAt
			started.StartedAt = notBefore(started.StartedAt, prev.CreatedAt)
		}
		return true, settleAck, nil
	}
	done, outcome, err := w.resume(ctx, sig, prev, d)
	if !done { // the wrapper checked the table: not reached
		return false, settleRequeue, fmt.Errorf("errand: task %s (%s): the backend did not start a task in state %s", sig.Name, sig.UUID, prev.State)
	}
	return false, outcome, err
}

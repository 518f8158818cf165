package pgdb

import (
	"fmt"
	"strings"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/statejson"
)

// Cancelling tasks (driver.Canceller) in the states layout: the function
// cancel_states (schema_backend.go) writes CANCELLED over each live,
// unfinished state in one statement, keeping the task's name, attempt
// and times, and set_states never writes over it but a PENDING.

// CancelArgs is a batch of cancels as the arrays cancel_states takes,
// one element per task, in order. Append fills it.
type CancelArgs struct {
	IDs, Tails        []string
	Created, Finished []*time.Time // nil: the time is zero
	Progress          []*string    // nil: keep the task's own
}

// Len is how many cancels a holds.
func (a *CancelArgs) Len() int { return len(a.IDs) }

// Append adds the cancel of st's task (its TaskUUID, Error, ErrorKind,
// ErrorDetail, CreatedAt, FinishedAt, Progress; the state is CANCELLED
// whatever st says, its name and attempt the task's own), or returns an
// error naming the task when it cannot be encoded, adding nothing.
func (a *CancelArgs) Append(st *driver.TaskState) error {
	tail, err := CancelTail(st)
	if err != nil {
		return err
	}
	a.IDs = append(a.IDs, st.TaskUUID)
	a.Tails = append(a.Tails, tail)
	a.Created = append(a.Created, timeArg(st.CreatedAt))
	a.Finished = append(a.Finished, timeArg(st.FinishedAt))
	a.Progress = append(a.Progress, progressArg(st.Progress))
	return nil
}

// cancelHead is how the body of a CANCELLED state without a UUID, name
// and attempt begins: what cancel_states writes in its place.
const cancelHead = `{"task_uuid":"","task_name":"","state":"CANCELLED"`

// CancelTail is the body of st's CANCELLED state after its task_uuid,
// task_name, state and attempt: what StateArgs.Append would store for it
// (its times zero, no progress), from its first field after the attempt
// to its closing brace. cancel_states writes the four before it from
// the task's row.
func CancelTail(st *driver.TaskState) (string, error) {
	rest := *st
	rest.TaskUUID, rest.TaskName, rest.State, rest.Attempt = "", "", driver.StateCancelled, 0
	rest.CreatedAt, rest.StartedAt, rest.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	rest.Progress = nil
	body, err := statejson.Marshal(&rest)
	if err != nil {
		return "", fmt.Errorf("encode cancel of %s: %w", st.TaskUUID, err)
	}
	tail, ok := strings.CutPrefix(string(body), cancelHead)
	if !ok {
		return "", fmt.Errorf("encode cancel of %s: the state's JSON begins %.60q, not %q", st.TaskUUID, body, cancelHead)
	}
	return tail, nil
}

// CancelStatesSQL is one statement cancelling a batch of tasks
// (driver.Canceller), in array order: sort the batch by task id in byte
// order, as set_states and start_states's callers do, so that two
// batches lock the rows they share in one order: $1 to $5 a CancelArgs's
// Args, $6 the expiry (an interval: a time.Duration). One row per task,
// in order: ord (from 1), written, then the previous state's columns as
// StateColumns reads them (all NULL: none).
func CancelStatesSQL(schema string) string {
	return "SELECT ord, written, prev_body, prev_created, prev_started, prev_finished, prev_progress FROM " +
		Table(schema, "cancel_states") + "($1, $2, $3, $4, $5, $6)"
}

// Args returns cancel_states's first five arguments: a's arrays.
func (a *CancelArgs) Args() []any {
	return []any{a.IDs, a.Tails, a.Created, a.Finished, a.Progress}
}

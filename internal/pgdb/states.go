package pgdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/statejson"
)

// The task states of errand's PostgreSQL result backend, as both drivers
// write and read them: the backend for its own calls, the broker in the
// statement of a co-located publish, fetch or ack (driver.Colocator). The
// table and the two functions that write it are in backendV1
// (schema_backend.go); this file is the Go side of that layout.
//
// A state is written through set_states or start_states only: a SUCCESS
// or FAILURE written notifies StatesChannel, which the backend's waiters
// listen on.

// StatesChannel is the LISTEN/NOTIFY channel the writes of states in
// schema notify, with the id of each task they wrote SUCCESS or FAILURE
// for (at commit).
func StatesChannel(schema string) string {
	ch := "errand_states:" + schema
	if len(ch) > 63 { // NAMEDATALEN - 1
		sum := sha256.Sum256([]byte(schema))
		ch = "errand_states:" + hex.EncodeToString(sum[:16])
	}
	return ch
}

// StateArgs is a batch of states as the arrays set_states and
// start_states take, one element per state, in order: the columns of
// the states table. Append fills it; Args are set_states's first eight
// arguments.
type StateArgs struct {
	IDs, Names, States         []string
	Attempts                   []int32
	Created, Started, Finished []*time.Time // nil: the time is zero
	Bodies                     []string
}

// Len is how many states a holds.
func (a *StateArgs) Len() int { return len(a.IDs) }

// Append adds st to a, or returns an error naming the task when its JSON
// cannot be encoded (a result's JSON not valid), adding nothing.
func (a *StateArgs) Append(st *driver.TaskState) error {
	rest := *st
	rest.CreatedAt, rest.StartedAt, rest.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	body, err := statejson.Marshal(&rest)
	if err != nil {
		return fmt.Errorf("encode state of %s: %w", st.TaskUUID, err)
	}
	a.IDs = append(a.IDs, st.TaskUUID)
	a.Names = append(a.Names, st.TaskName)
	a.States = append(a.States, string(st.State))
	a.Attempts = append(a.Attempts, int32(st.Attempt))
	a.Created = append(a.Created, timeArg(st.CreatedAt))
	a.Started = append(a.Started, timeArg(st.StartedAt))
	a.Finished = append(a.Finished, timeArg(st.FinishedAt))
	a.Bodies = append(a.Bodies, string(body))
	return nil
}

func timeArg(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Args returns set_states's first eight arguments: a's arrays.
func (a *StateArgs) Args() []any {
	return []any{a.IDs, a.Names, a.States, a.Attempts, a.Created, a.Started, a.Finished, a.Bodies}
}

// SetStatesSQL is one statement writing a batch of states: $1 to $8 a
// StateArgs's Args, $9 the expiry (an interval: a time.Duration), $10
// if_absent (write only where a task has no state). Its one row is how
// many states it wrote. Of several states of one task in the batch, the
// last is written.
func SetStatesSQL(schema string) string {
	return "SELECT " + Table(schema, "set_states") + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
}

// WriteStates writes a's states to l's schema through w (SetStatesSQL)
// with l's Expiry, and returns how many it wrote.
func (l *Location) WriteStates(ctx context.Context, w Writer, a *StateArgs, ifAbsent bool) (int, error) {
	var n int32
	err := w.QueryRow(ctx, SetStatesSQL(l.Schema), append(a.Args(), l.Expiry, ifAbsent)...).Scan(&n)
	return int(n), err
}

// StartStatesSQL is one statement beginning a batch of attempts
// (driver.Starter), in array order: sort the batch by task id in byte
// order (requests of one task in request order), as set_states writes, so
// that two batches lock the rows they share in one order: $1 to $4 the ids, names, states and attempts of the
// STARTED states to write (a StateArgs's), $5 their FirstDelivery flags
// (a []bool), $6 to $8 their created and started times and bodies, $9 the
// expiry. One row per request, in order: ord (from 1), written, then the
// previous state's columns as StateColumns reads them (all NULL: none).
func StartStatesSQL(schema string) string {
	return "SELECT ord, written, prev_body, prev_created, prev_started, prev_finished FROM " +
		Table(schema, "start_states") + "($1, $2, $3, $4, $5, $6, $7, $8, $9)"
}

// StartArgs returns StartStatesSQL's arguments for a's states (the
// STARTED states of the requests), firsts their FirstDelivery and expiry.
func StartArgs(a *StateArgs, firsts []bool, expiry time.Duration) []any {
	return []any{a.IDs, a.Names, a.States, a.Attempts, firsts, a.Created, a.Started, a.Bodies, expiry}
}

// StateColumns are the columns a state is read from, in DecodeState's
// order; GetStateSQL reads them for one task.
const StateColumns = "body, created_at, started_at, finished_at"

// GetStateSQL is one statement reading task $1's live state (no row: it
// has none, or it expired): StateColumns.
func GetStateSQL(schema string) string {
	return "SELECT " + StateColumns + " FROM " + Table(schema, "states") + " WHERE id = $1 AND expires_at > now()"
}

// DecodeState is the state of task id read from StateColumns.
func DecodeState(id, body string, created, started, finished *time.Time) (*driver.TaskState, error) {
	var st driver.TaskState
	if err := statejson.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode state of %s: %w", id, err)
	}
	st.CreatedAt, st.StartedAt, st.FinishedAt = timeCol(created), timeCol(started), timeCol(finished)
	return &st, nil
}

func timeCol(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

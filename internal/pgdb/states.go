package pgdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
// A state is written through set_states, start_states or cancel_states
// only: a SUCCESS, FAILURE or CANCELLED written notifies StatesChannel,
// which the backend's waiters listen on. A CANCELLED state is sticky
// (driver.Canceller): set_states writes nothing but PENDING over it and
// names the tasks it refused, start_states refuses it as any terminal
// state.

// StatesChannel is the LISTEN/NOTIFY channel the writes of states in
// schema notify, with the id of each task they wrote SUCCESS, FAILURE or
// CANCELLED for (at commit).
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
// the states table. Append fills it; Args are set_states's first nine
// arguments.
type StateArgs struct {
	IDs, Names, States         []string
	Attempts                   []int32
	Created, Started, Finished []*time.Time // nil: the time is zero
	Bodies                     []string
	Progress                   []*string // nil: none; else the JSON as given, byte for byte
}

// Len is how many states a holds.
func (a *StateArgs) Len() int { return len(a.IDs) }

// Append adds st to a, or returns an error naming the task when its JSON
// cannot be encoded (a result's JSON not valid), adding nothing.
func (a *StateArgs) Append(st *driver.TaskState) error {
	rest := *st
	rest.CreatedAt, rest.StartedAt, rest.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	rest.Progress = nil // its own column, byte for byte (JSON encoding would compact it)
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
	a.Progress = append(a.Progress, progressArg(st.Progress))
	return nil
}

func progressArg(p []byte) *string {
	if len(p) == 0 {
		return nil
	}
	s := string(p)
	return &s
}

func timeArg(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Args returns set_states's first nine arguments: a's arrays.
func (a *StateArgs) Args() []any {
	return []any{a.IDs, a.Names, a.States, a.Attempts, a.Created, a.Started, a.Finished, a.Bodies, a.Progress}
}

// SetStatesSQL is one statement writing a batch of states: $1 to $9 a
// StateArgs's Args, $10 the expiry (an interval: a time.Duration), $11
// if_absent (write only where a task has no state). Its one row: n, how
// many states it wrote, and refused, a JSON array of the ids of the tasks
// whose state it did not write because they are CANCELLED (NULL: none) (a state other than PENDING
// over a live CANCELLED: driver.Canceller). Of several states of one
// task in the batch, the last is written.
func SetStatesSQL(schema string) string {
	// refused as JSON text (NULL: none), which a *sql.Tx scans too
	return "SELECT n, CASE WHEN cardinality(refused) > 0 THEN to_json(refused)::text END FROM " +
		Table(schema, "set_states") + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
}

// WriteStates writes a's states to l's schema through w (SetStatesSQL)
// with l's Expiry, and returns how many it wrote and the ids of the
// tasks it refused because they are CANCELLED.
func (l *Location) WriteStates(ctx context.Context, w Writer, a *StateArgs, ifAbsent bool) (n int, refused []string, err error) {
	var n32 int32
	var ids *string
	if err = w.QueryRow(ctx, SetStatesSQL(l.Schema), append(a.Args(), l.Expiry, ifAbsent)...).Scan(&n32, &ids); err != nil {
		return 0, nil, err
	}
	if ids != nil {
		if err := json.Unmarshal([]byte(*ids), &refused); err != nil {
			return int(n32), nil, fmt.Errorf("read the tasks set_states refused: %w", err)
		}
	}
	return int(n32), refused, nil
}

// Refused returns errs (allocated when nil, of length n) with an error
// wrapping driver.ErrCancelled set for each state of sts, not PENDING,
// whose task is one of refused (set_states's answer), unless it already
// has one. what names the caller in the error ("postgres backend").
func Refused(what string, errs []error, sts []*driver.TaskState, refused []string) []error {
	if len(refused) == 0 {
		return errs
	}
	set := make(map[string]bool, len(refused))
	for _, id := range refused {
		set[id] = true
	}
	for i, st := range sts {
		if st == nil || !set[st.TaskUUID] || st.State == driver.StatePending {
			continue
		}
		if errs == nil {
			errs = make([]error, len(sts))
		}
		if errs[i] == nil {
			errs[i] = fmt.Errorf("%s: %s of task %s not written over its CANCELLED state: %w", what, st.State, st.TaskUUID, driver.ErrCancelled)
		}
	}
	return errs
}

// StartStatesSQL is one statement beginning a batch of attempts
// (driver.Starter), in array order: sort the batch by task id in byte
// order (requests of one task in request order), as set_states writes, so
// that two batches lock the rows they share in one order: $1 to $4 the ids, names, states and attempts of the
// STARTED states to write (a StateArgs's), $5 their FirstDelivery flags
// (a []bool), $6 to $9 their created and started times, bodies and
// progress, $10 the expiry. One row per request, in order: ord (from 1),
// written, then the previous state's columns as StateColumns reads them
// (all NULL: none).
func StartStatesSQL(schema string) string {
	return "SELECT ord, written, prev_body, prev_created, prev_started, prev_finished, prev_progress FROM " +
		Table(schema, "start_states") + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
}

// StartArgs returns StartStatesSQL's arguments for a's states (the
// STARTED states of the requests), firsts their FirstDelivery and expiry.
func StartArgs(a *StateArgs, firsts []bool, expiry time.Duration) []any {
	return []any{a.IDs, a.Names, a.States, a.Attempts, firsts, a.Created, a.Started, a.Bodies, a.Progress, expiry}
}

// StateColumns are the columns a state is read from, in DecodeState's
// order; GetStateSQL reads them for one task.
const StateColumns = "body, created_at, started_at, finished_at, progress"

// GetStateSQL is one statement reading task $1's live state (no row: it
// has none, or it expired): StateColumns.
func GetStateSQL(schema string) string {
	return "SELECT " + StateColumns + " FROM " + Table(schema, "states") + " WHERE id = $1 AND expires_at > now()"
}

// DecodeState is the state of task id read from StateColumns.
func DecodeState(id, body string, created, started, finished *time.Time, progress *string) (*driver.TaskState, error) {
	var st driver.TaskState
	if err := statejson.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode state of %s: %w", id, err)
	}
	st.CreatedAt, st.StartedAt, st.FinishedAt = timeCol(created), timeCol(started), timeCol(finished)
	st.Progress = nil
	if progress != nil {
		st.Progress = json.RawMessage(*progress)
	}
	return &st, nil
}

func timeCol(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

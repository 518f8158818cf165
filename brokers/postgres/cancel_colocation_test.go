package postgresbroker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// A co-located fetch does not start a CANCELLED task (it delivers it with
// the CANCELLED as its start's Prev, nothing written), and a co-located
// settle of a task cancelled while it ran acks its delivery, leaves the
// CANCELLED in place and answers ErrCancelled for it, writing the batch's
// other states: each in the one statement it already is.
func TestColocationCancelled(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b, c, be := colocated(t, pool, schema)
	created := time.Now().UTC().Truncate(time.Microsecond)
	cancelled := func(id string) *driver.TaskState {
		return &driver.TaskState{TaskUUID: id, TaskName: "t", State: driver.StateCancelled, Error: "errand: task cancelled",
			CreatedAt: created, FinishedAt: created}
	}
	if errs := be.SetStates(ctx, []*driver.TaskState{cancelled("before")}); errs != nil {
		t.Fatal(errs)
	}
	for _, id := range []string{"before", "while", "ok"} {
		if err := b.Publish(ctx, driver.Message{Queue: "q", ID: id, Body: []byte("{}"), Task: "t", TaskAttempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		ds     []*driver.Delivery
		starts []*driver.StartResult
		err    error
	)
	if k := count(ctx, func(ctx context.Context) {
		ds, starts, _, err = c.FetchStart(ctx, "q", 3, time.Minute, []string{"t"})
	}); k != 1 {
		t.Errorf("a co-located FetchStart ran %d statements; want 1", k)
	}
	if err != nil || len(ds) != 3 {
		t.Fatalf("FetchStart = %d deliveries, %v; want 3", len(ds), err)
	}
	for i, d := range ds {
		s := starts[i]
		switch d.ID {
		case "before":
			if s == nil || s.Err != nil || s.Written || s.Prev == nil || s.Prev.State != driver.StateCancelled {
				t.Errorf("FetchStart of a CANCELLED task: start %+v; want not written, Prev CANCELLED (driver.Starter: terminal)", s)
			}
			if st := stateOf(t, be, d.ID); st == nil || st.State != driver.StateCancelled {
				t.Errorf("FetchStart of a CANCELLED task left %+v; want CANCELLED untouched", st)
			}
		default:
			if s == nil || s.Err != nil || !s.Written {
				t.Errorf("FetchStart of %s: start %+v; want STARTED written", d.ID, s)
			}
		}
	}

	// "while" is cancelled as it runs; its worker's SUCCESS comes late.
	if errs := be.SetStates(ctx, []*driver.TaskState{cancelled("while")}); errs != nil {
		t.Fatal(errs)
	}
	fin := created.Add(time.Second)
	sts := make([]*driver.TaskState, len(ds))
	for i, d := range ds {
		sts[i] = &driver.TaskState{TaskUUID: d.ID, TaskName: "t", State: driver.StateSuccess, Attempt: 1,
			Results: []driver.Result{{Type: "int", Value: json.RawMessage("1")}}, CreatedAt: created, FinishedAt: fin}
	}
	var errs []error
	if k := count(ctx, func(ctx context.Context) { errs = c.Settle(ctx, ds, sts) }); k != 1 {
		t.Errorf("a co-located Settle ran %d statements; want 1 (no extra statement for the cancel check)", k)
	}
	for i, d := range ds {
		st := stateOf(t, be, d.ID)
		switch d.ID {
		case "ok":
			if errs != nil && errs[i] != nil || st == nil || st.State != driver.StateSuccess {
				t.Errorf("Settle of %s: %v, state %+v; want nil, SUCCESS", d.ID, errs[i], st)
			}
		default:
			if errs == nil || !errors.Is(errs[i], driver.ErrCancelled) || errors.Is(errs[i], driver.ErrLeaseLost) {
				t.Errorf("Settle of the CANCELLED task %s: %v; want an error wrapping ErrCancelled (driver.Colocation.Settle)", d.ID, errs)
			}
			if st == nil || st.State != driver.StateCancelled {
				t.Errorf("Settle over the CANCELLED task %s left %+v; want CANCELLED kept", d.ID, st)
			}
		}
	}
	if got := rows(t, pool, schema, "messages", "queue = 'q'"); got != 0 {
		t.Errorf("Settle left %d messages in the queue; want every delivery acked, the cancelled ones too", got)
	}
}

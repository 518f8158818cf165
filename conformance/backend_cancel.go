package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Backend cases for driver.Canceller (BackendCaps.Cancel): a cancel is
// recorded in one atomic step per task, over a state that is not
// terminal only, and kept: no later write but a PENDING replaces it. A
// backend without the capability passes them untested: errand cancels
// through the portable path there (Capabilities checks the declaration
// both ways).

const cancelName = "conformance.cancel"

// cancelError is the Error of every CANCELLED state the cases record.
const cancelError = "errand: task cancelled"

// cancelOf is the CANCELLED state a canceller records for task id, at now:
// it knows nothing of the task but its UUID.
func cancelOf(id string) *errand.TaskState {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &errand.TaskState{TaskUUID: id, State: errand.StateCancelled, Error: cancelError, ErrorKind: "cancelled", CreatedAt: now, FinishedAt: now}
}

// canceller returns c's backend as a driver.Canceller, or false (and
// nothing to check) when the harness does not declare Cancel.
func (c *becase) canceller() (driver.Canceller, bool) {
	if !c.h.Caps.Cancel {
		c.t.Logf("the harness does not declare Cancel: nothing to check (Backend/Capabilities checks that the backend is no driver.Canceller)")
		return nil, false
	}
	cn, ok := c.b.(driver.Canceller)
	if !ok {
		c.t.Fatalf("capabilities promise broken: the harness declares Cancel but %T does not implement driver.Canceller", c.b)
	}
	return cn, ok
}

// cancel calls Cancel for sts and checks the answer's shape: one result
// per state, none failed.
func (c *becase) cancel(cn driver.Canceller, sts ...*errand.TaskState) []driver.CancelResult {
	c.t.Helper()
	res := cn.Cancel(c.ctx, sts)
	if len(res) != len(sts) {
		c.t.Fatalf("batch convention promise broken: Cancel of %d states answered %d results; want one per state, in order", len(sts), len(res))
	}
	for i, r := range res {
		if r.Err != nil {
			c.t.Fatalf("Cancel: state %d (%s): %v", i, sts[i].TaskUUID, r.Err)
		}
	}
	return res
}

// cancelRow is one row of the cancel table: the task's state before
// (nil: none) and whether Cancel writes over it.
type cancelRow struct {
	prev   errand.State // "": no state
	writes bool
}

func cancelRows() []cancelRow {
	return []cancelRow{
		{"", false},
		{errand.StatePending, true},
		{errand.StateReceived, true},
		{errand.StateStarted, true},
		{errand.StateRetry, true},
		{errand.StateSuccess, false},
		{errand.StateFailure, false},
		{errand.StateCancelled, false},
	}
}

// cancelTable: one Cancel of a task in each state (and of one with
// none) writes CANCELLED over each state that is not terminal and
// nothing elsewhere, answering each task's previous state in order.
func cancelTable(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	cn, ok := c.canceller()
	if !ok {
		return
	}
	rows := cancelRows()
	created := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	prevs := make([]*errand.TaskState, len(rows))
	sts := make([]*errand.TaskState, len(rows))
	for i, r := range rows {
		id := name(t, fmt.Sprint("task", i))
		if r.prev != "" {
			prevs[i] = &errand.TaskState{TaskUUID: id, TaskName: cancelName, State: r.prev, Attempt: 1, Error: "earlier", CreatedAt: created}
			c.set(prevs[i])
		}
		sts[i] = cancelOf(id)
	}
	res := c.cancel(cn, sts...)
	for i, r := range rows {
		what := string(r.prev)
		if what == "" {
			what = "no state"
		}
		id := sts[i].TaskUUID
		switch {
		case res[i].Written != r.writes:
			t.Errorf("cancel promise broken: Cancel of a task in %s answered written = %v; want %v (driver.Canceller writes over a state that is not terminal, and only there)", what, res[i].Written, r.writes)
		case r.prev == "" && res[i].Prev != nil:
			t.Errorf("cancel promise broken: Cancel of a task with no state answered Prev %+v; want nil", res[i].Prev)
		case r.prev != "" && (res[i].Prev == nil || res[i].Prev.State != r.prev || res[i].Prev.TaskName != cancelName):
			t.Errorf("cancel promise broken: Cancel of a task in %s answered Prev %+v; want its state before the call (results in request order)", what, res[i].Prev)
		}
		got, err := c.b.GetState(c.ctx, id)
		switch {
		case r.prev == "":
			if !errors.Is(err, errand.ErrTaskNotFound) {
				t.Errorf("cancel promise broken: Cancel of a task with no state left it %s; want it still unknown (nothing to cancel: driver.Canceller)", describeState(got, err))
			}
		case r.writes:
			if err != nil || got.State != errand.StateCancelled || got.Error != cancelError {
				t.Errorf("cancel promise broken: Cancel of a task in %s, answered written, left it %s, error %q; want CANCELLED with the canceller's error %q", what, describeState(got, err), errorOf(got), cancelError)
			}
		default:
			if err != nil || got.State != r.prev || got.Error != "earlier" {
				t.Errorf("cancel promise broken: Cancel of a task in %s (terminal) changed it into %s, error %q; want it untouched", what, describeState(got, err), errorOf(got))
			}
		}
	}
}

func errorOf(st *errand.TaskState) string {
	if st == nil {
		return ""
	}
	return st.Error
}

// cancelKeepsTask: the CANCELLED written keeps the task's name, attempt
// and CreatedAt (the canceller knows none of them), and its FinishedAt
// is no earlier than that CreatedAt, though the task was created by a
// clock an hour ahead of the canceller's.
func cancelKeepsTask(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	cn, ok := c.canceller()
	if !ok {
		return
	}
	for i, ahead := range []time.Duration{-time.Hour, time.Hour} {
		id := name(t, fmt.Sprint("task", i))
		created := time.Now().UTC().Add(ahead).Truncate(time.Millisecond)
		c.set(&errand.TaskState{TaskUUID: id, TaskName: cancelName, State: errand.StateStarted, Attempt: 3, CreatedAt: created, StartedAt: created})
		st := cancelOf(id)
		if res := c.cancel(cn, st); !res[0].Written {
			t.Fatalf("cancel promise broken: Cancel of a STARTED task answered %+v; want written", res[0])
		}
		got, err := c.b.GetState(c.ctx, id)
		switch {
		case err != nil:
			t.Fatalf("GetState after Cancel: %v", err)
		case got.State != errand.StateCancelled || got.TaskName != cancelName || got.Attempt != 3:
			t.Errorf("cancel promise broken: a STARTED task %q of attempt 3, cancelled, reads %s; want CANCELLED keeping the task's name and attempt (driver.Canceller)", cancelName, describeState(got, err))
		case !got.CreatedAt.Equal(created):
			t.Errorf("cancel promise broken: a task created at %v, cancelled, has CreatedAt %v; want the task's own (the canceller's was %v)", created, got.CreatedAt, st.CreatedAt)
		case got.FinishedAt.Before(got.CreatedAt):
			t.Errorf("cancel promise broken: a task created at %v (a clock %v off the canceller's), cancelled, has FinishedAt %v, before its CreatedAt; want it no earlier", created, ahead, got.FinishedAt)
		}
	}
}

// cancelSticky: once a task is CANCELLED, SetStates writes none of a
// worker's states over it and answers each with an error wrapping
// ErrCancelled, while the batch's other states are written; a PENDING
// (the task sent again under its UUID) replaces it.
func cancelSticky(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	cn, ok := c.canceller()
	if !ok {
		return
	}
	id, other := name(t, "cancelled"), name(t, "other")
	now := time.Now().UTC().Truncate(time.Millisecond)
	c.set(&errand.TaskState{TaskUUID: id, TaskName: cancelName, State: errand.StateStarted, Attempt: 1, CreatedAt: now})
	if res := c.cancel(cn, cancelOf(id)); !res[0].Written {
		t.Fatalf("cancel promise broken: Cancel of a STARTED task answered %+v; want written", res[0])
	}
	late := func(s errand.State, task string) *errand.TaskState {
		return &errand.TaskState{TaskUUID: task, TaskName: cancelName, State: s, Attempt: 1, CreatedAt: now, FinishedAt: now}
	}
	sts := []*errand.TaskState{late(errand.StateSuccess, id), late(errand.StateSuccess, other), late(errand.StateFailure, id),
		late(errand.StateRetry, id), late(errand.StateReceived, id), late(errand.StateStarted, id)}
	errs, err := checkAnswer("SetStates", len(sts), c.b.SetStates(c.ctx, sts))
	if err != nil {
		t.Fatalf("batch convention promise broken: %v", err)
	}
	for i, st := range sts {
		switch {
		case st.TaskUUID == other && errs[i] != nil:
			t.Errorf("cancel promise broken: SetStates answered %v for another task's SUCCESS in a batch beside a cancelled task's states; want nil (a refused state fails alone)", errs[i])
		case st.TaskUUID == id && !errors.Is(errs[i], errand.ErrCancelled):
			t.Errorf("cancel promise broken: SetStates of %s over a CANCELLED task answered %v; want an error satisfying errors.Is(err, errand.ErrCancelled) (driver.Canceller: a cancel is never overwritten)", st.State, errs[i])
		}
	}
	if got, err := c.b.GetState(c.ctx, id); err != nil || got.State != errand.StateCancelled || got.Error != cancelError {
		t.Errorf("cancel promise broken: after a worker's SUCCESS, FAILURE, RETRY, RECEIVED and STARTED over a CANCELLED task, it reads %s, error %q; want CANCELLED as the canceller wrote it", describeState(got, err), errorOf(got))
	}
	if got, err := c.b.GetState(c.ctx, other); err != nil || got.State != errand.StateSuccess {
		t.Errorf("state promise broken: a SUCCESS written beside refused states reads %s; want SUCCESS", describeState(got, err))
	}
	if err := setOne(c.ctx, c.b, late(errand.StatePending, id)); err != nil {
		t.Errorf("cancel promise broken: SetStates of PENDING over a CANCELLED task (sent again under its UUID) answered %v; want it written (driver.Canceller: PENDING may replace a cancel)", err)
	} else if got, err := c.b.GetState(c.ctx, id); err != nil || got.State != errand.StatePending {
		t.Errorf("cancel promise broken: a PENDING written over a CANCELLED task reads %s; want PENDING", describeState(got, err))
	}
}

// cancelConcurrent: K racing Cancels of one STARTED task and a worker's
// SUCCESS of it: exactly one outcome, told consistently. Either the
// SUCCESS lands first (no Cancel writes, each finds SUCCESS, and the task
// ends SUCCESS), or exactly one Cancel writes (every other finds
// CANCELLED, SetStates answers ErrCancelled, and the task ends
// CANCELLED).
func cancelConcurrent(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	cn, ok := c.canceller()
	if !ok {
		return
	}
	const k, rounds = 8, 6
	for round := range rounds {
		id := name(t, fmt.Sprint("task", round))
		now := time.Now().UTC().Truncate(time.Millisecond)
		c.set(&errand.TaskState{TaskUUID: id, TaskName: cancelName, State: errand.StateStarted, Attempt: 1, CreatedAt: now})
		begin := make(chan struct{})
		var wg sync.WaitGroup
		res := make([]driver.CancelResult, k)
		for i := range k {
			wg.Go(func() {
				<-begin
				if r := cn.Cancel(c.ctx, []*errand.TaskState{cancelOf(id)}); len(r) == 1 {
					res[i] = r[0]
				} else {
					res[i].Err = fmt.Errorf("%d results for 1 state", len(r))
				}
			})
		}
		var setErr error
		wg.Go(func() {
			<-begin
			setErr = setOne(c.ctx, c.b, &errand.TaskState{TaskUUID: id, TaskName: cancelName, State: errand.StateSuccess, Attempt: 1, CreatedAt: now, FinishedAt: now})
		})
		close(begin)
		wg.Wait()
		written := 0
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("Cancel: %v", r.Err)
			}
			if r.Written {
				written++
			} else if r.Prev == nil || !r.Prev.State.Terminal() {
				t.Errorf("cancel promise broken: a racing Cancel that did not write found %s; want a terminal state (one that did not write lost to another cancel or to the SUCCESS)", describeState(r.Prev, nil))
			}
		}
		got, err := c.b.GetState(c.ctx, id)
		if err != nil {
			t.Fatalf("GetState: %v", err)
		}
		cancelled := written == 1 && got.State == errand.StateCancelled && errors.Is(setErr, errand.ErrCancelled)
		succeeded := written == 0 && got.State == errand.StateSuccess && setErr == nil
		if !cancelled && !succeeded {
			t.Fatalf("cancel promise broken: %d racing Cancels and a SUCCESS of one STARTED task: %d Cancels wrote, SetStates answered %v, the task ends %s; want one outcome: the cancel (exactly one wrote, SetStates answered ErrCancelled, CANCELLED) or the SUCCESS (none wrote, SetStates nil, SUCCESS) — the check and the write of a cancel are one atomic step",
				k, written, setErr, got.State)
		}
	}
}

// cancelWait: a waiter (driver.StateWaiter) waiting for a final state is
// woken by a cancel, and reads CANCELLED.
func cancelWait(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	cn, ok := c.canceller()
	if !ok {
		return
	}
	w, ok := c.b.(driver.StateWaiter)
	if !ok {
		t.Logf("%T is no driver.StateWaiter: no waiter to wake", c.b)
		return
	}
	id := name(t, "task")
	c.set(&errand.TaskState{TaskUUID: id, TaskName: cancelName, State: errand.StateStarted, Attempt: 1, CreatedAt: time.Now().UTC()})
	type answer struct {
		st  *errand.TaskState
		err error
	}
	got := make(chan answer, 1)
	wctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	go func() {
		st, err := w.WaitState(wctx, id, func(st *errand.TaskState) bool { return st.State.Terminal() })
		got <- answer{st, err}
	}()
	// Let the waiter block before the cancel that must wake it.
	sleepUntil(c.ctx, time.Now().Add(h.Timing.Prompt/5))
	c.cancel(cn, cancelOf(id))
	timer := time.NewTimer(h.Timing.Prompt)
	defer timer.Stop()
	select {
	case a := <-got:
		if a.err != nil || a.st.State != errand.StateCancelled {
			t.Fatalf("cancel promise broken: a waiter woken by a cancel read %s; want CANCELLED", describeState(a.st, a.err))
		}
	case <-timer.C:
		cancel()
		<-got
		t.Fatalf("cancel promise broken: a waiter for a final state was not told of a cancel within %v (CANCELLED is terminal: a write of it wakes waiters like any other)", h.Timing.Prompt)
	}
}

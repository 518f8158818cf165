package errand

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// Cancelling tasks: Server.Cancel (and the result handles' Cancel) records
// CANCELLED in the backend, through its driver.Canceller where it has one
// (one atomic step, never replaced by a later write), else by the portable
// path (read the state, then write CANCELLED), and then tells the
// workers through the broker's driver.CancelNotifier where it has one.
// A task not yet started never starts; a running one has its ctx
// cancelled by its worker (cancelwatch.go), whose late outcome is
// discarded. See docs/task-control.md.

// CancelOutcome says what Cancel did to one task (or a group).
type CancelOutcome string

// The outcomes of a cancel.
const (
	// CancelQueued: the task had not started (queued, scheduled, or
	// waiting for a retry): it is recorded CANCELLED and never starts.
	CancelQueued CancelOutcome = "queued"
	// CancelRunning: the task was RECEIVED or STARTED: it is recorded
	// CANCELLED and its worker cancels its ctx (with a cause satisfying
	// errors.Is(err, ErrCancelled)) and discards its outcome.
	CancelRunning CancelOutcome = "running"
	// CancelFinished: the task had already ended (SUCCESS, FAILURE or
	// CANCELLED): nothing changed.
	CancelFinished CancelOutcome = "finished"
	// CancelUnknown: the backend knows no task or group by that id
	// (never sent, or its state expired): nothing changed.
	CancelUnknown CancelOutcome = "unknown"
)

// TaskCancel is what a cancel did to one task.
type TaskCancel struct {
	UUID    string
	Name    string // the task's name as its state records it; "" when unknown
	Outcome CancelOutcome
	Prev    State // the task's state before the cancel; "" when unknown
}

// CancelReport is what a cancel did.
type CancelReport struct {
	// Outcome is the task's outcome; for several tasks (a group, a chain,
	// a chord): running if any was running, else queued if any was
	// cancelled, else finished if any was known, else unknown.
	Outcome CancelOutcome
	// Group: the id named a group (or a chord's group) rather than a task.
	Group bool
	// Tasks has one entry per task the cancel named, in group (or chain)
	// order.
	Tasks []TaskCancel
}

// cancelError is the Error of a CANCELLED state errand records.
const cancelError = "errand: task cancelled"

// Cancel cancels the task whose UUID is id or, when no task has that
// UUID, every member of the group (or chord's group) whose UUID is id. A
// task that has not started never starts; a running task's ctx is
// cancelled on its worker, at once on a broker that sends cancel notices
// (driver.CancelNotifier), else at its next lease extension (within
// WorkerConfig.ExtendEvery), and whatever it returns then is discarded.
// A cancelled task's OnSuccess callbacks (a chain's later tasks) are
// cancelled with it and its OnError callbacks never run; a cancelled
// group member counts toward its group's completion, and a chord none of
// whose members failed but one of whose members was cancelled has its
// callback cancelled (docs/concepts.md, "Workflows").
//
// An id the backend does not know, and a task already finished, are
// answered by the report (CancelUnknown, CancelFinished) with a nil
// error: the error is only for failing to cancel (a closed server, an
// unreachable backend). On a backend without driver.Canceller a worker's
// write that lands just after the cancel (its task's final state) may
// replace CANCELLED; see docs/task-control.md.
func (s *Server) Cancel(ctx context.Context, id string) (CancelReport, error) {
	if id == "" {
		return CancelReport{}, errors.New("errand: Cancel: empty task or group id")
	}
	rep, err := s.cancelTasks(ctx, []string{id})
	if err != nil || rep.Outcome != CancelUnknown {
		return rep, err
	}
	sts, err := s.backend.GroupStates(ctx, id)
	switch {
	case errors.Is(err, driver.ErrGroupNotFound):
		return rep, nil
	case err != nil:
		return CancelReport{}, fmt.Errorf("errand: cancel %s: read its group: %w", id, err)
	}
	ids := make([]string, len(sts))
	for i, st := range sts {
		ids[i] = st.TaskUUID
	}
	rep, err = s.cancelTasks(ctx, ids)
	rep.Group = true
	return rep, err
}

// Cancel cancels the task, as Server.Cancel does for its UUID (a task
// UUID only, never a group's).
func (r *AsyncResult) Cancel(ctx context.Context) (CancelReport, error) {
	return r.srv.cancelTasks(ctx, []string{r.Signature.UUID})
}

// Cancel cancels every task of the chain not finished yet (one call for
// all), as Server.Cancel does for each.
func (c *ChainAsyncResult) Cancel(ctx context.Context) (CancelReport, error) {
	if len(c.Results) == 0 {
		return CancelReport{Outcome: CancelUnknown}, nil
	}
	ids := make([]string, len(c.Results))
	for i, r := range c.Results {
		ids[i] = r.Signature.UUID
	}
	return c.Results[0].srv.cancelTasks(ctx, ids)
}

// Cancel cancels the chord's members and its callback (one call for
// all): the report's Tasks are the members in group order, then the
// callback.
func (c *ChordAsyncResult) Cancel(ctx context.Context) (CancelReport, error) {
	ids := make([]string, 0, len(c.Group)+1)
	for _, r := range c.Group {
		ids = append(ids, r.Signature.UUID)
	}
	ids = append(ids, c.Callback.Signature.UUID)
	rep, err := c.Callback.srv.cancelTasks(ctx, ids)
	rep.Group = true
	return rep, err
}

// cancelTasks cancels the tasks ids name, in one Cancel call of the
// backend, then notifies the workers of those it cancelled.
func (s *Server) cancelTasks(ctx context.Context, ids []string) (CancelReport, error) {
	now := stateTime()
	sts := make([]*TaskState, len(ids))
	for i, id := range ids {
		sts[i] = &TaskState{TaskUUID: id, State: StateCancelled, Error: cancelError, ErrorKind: string(KindCancelled), CreatedAt: now, FinishedAt: now}
	}
	res := s.backend.Cancel(ctx, sts)
	rep := CancelReport{Tasks: make([]TaskCancel, len(ids))}
	var written []string
	var errs []error
	for i, r := range res {
		tc := TaskCancel{UUID: ids[i], Outcome: CancelUnknown}
		switch {
		case r.Err != nil:
			errs = append(errs, fmt.Errorf("task %s: %w", ids[i], r.Err))
		case r.Prev == nil:
		case r.Written:
			tc.Name, tc.Prev, tc.Outcome = r.Prev.TaskName, r.Prev.State, CancelQueued
			if r.Prev.State == StateReceived || r.Prev.State == StateStarted {
				tc.Outcome = CancelRunning
			}
			written = append(written, ids[i])
		default:
			tc.Name, tc.Prev, tc.Outcome = r.Prev.TaskName, r.Prev.State, CancelFinished
		}
		rep.Tasks[i] = tc
	}
	if len(errs) > 0 {
		return rep, fmt.Errorf("errand: cancel: %w", errors.Join(errs...))
	}
	rep.Outcome = overall(rep.Tasks)
	if err := s.broker.NotifyCancel(ctx, written); err != nil {
		// The cancels are recorded: workers find them at their tasks'
		// next lease extension.
		s.log.Warn("errand: cancel recorded but the workers were not notified; running tasks stop at their next lease extension", "tasks", written, "err", err)
	}
	return rep, nil
}

// overall is the outcome of several tasks' cancels (CancelReport.Outcome).
func overall(ts []TaskCancel) CancelOutcome {
	out := CancelUnknown
	for _, t := range ts {
		switch {
		case t.Outcome == CancelRunning:
			return CancelRunning
		case t.Outcome == CancelQueued:
			out = CancelQueued
		case t.Outcome == CancelFinished && out == CancelUnknown:
			out = CancelFinished
		}
	}
	return out
}

package portable

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// Cancel records sts (each CANCELLED, with its task's UUID, the
// canceller's Error and ErrorKind, CreatedAt and FinishedAt) as
// driver.Canceller.Cancel says, and answers one result per state, in
// order. Through the backend's Canceller where it has one (one atomic step
// per task, kept against later writes), with its answer checked against
// the contract; else by the portable path: GetState of each task, then
// one SetStates of the CANCELLED states of those whose state is neither
// absent nor terminal, each built as a Canceller would (the previous
// state's TaskName, Attempt and CreatedAt, FinishedAt no earlier than
// that CreatedAt). On the portable path a worker's write that lands
// after the cancel (its attempt's final state, or its start read before
// the cancel) replaces it: the race the Canceller closes.
func (b *Backend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	fail := func(err error) []driver.CancelResult {
		for i := range out {
			out[i] = driver.CancelResult{Err: err}
		}
		return out
	}
	if err := b.Before(ctx); err != nil {
		return fail(err)
	}
	if b.Canceller != nil {
		res := b.Canceller.Cancel(ctx, sts)
		if len(res) != len(sts) {
			return fail(fmt.Errorf("errand: backend %T broke the batch convention of package driver: Cancel answered %d results for %d states", b.Drv, len(res), len(sts)))
		}
		for i, r := range res {
			switch {
			case r.Err != nil:
				r = driver.CancelResult{Err: b.After(ctx, r.Err)}
			case r.Written && (r.Prev == nil || r.Prev.State.Terminal()):
				r = driver.CancelResult{Err: fmt.Errorf("errand: backend %T broke the driver.Canceller contract: task %s with previous state %s: written, want not written", b.Drv, sts[i].TaskUUID, StateName(r.Prev))}
			case !r.Written && r.Prev != nil && !r.Prev.State.Terminal():
				r = driver.CancelResult{Err: fmt.Errorf("errand: backend %T broke the driver.Canceller contract: task %s with previous state %s: not written, want written", b.Drv, sts[i].TaskUUID, StateName(r.Prev))}
			}
			out[i] = r
		}
		return out
	}
	var write []*driver.TaskState
	var at []int
	for i, st := range sts {
		prev, err := b.GetState(ctx, st.TaskUUID)
		switch {
		case errors.Is(err, driver.ErrTaskNotFound):
			continue // unknown or expired: nothing to cancel
		case err != nil:
			out[i].Err = err
			continue
		}
		out[i].Prev = prev
		if prev.State.Terminal() {
			continue
		}
		write = append(write, CancelledState(st, prev))
		at = append(at, i)
	}
	if len(write) == 0 {
		return out
	}
	errs := b.SetStates(ctx, write)
	for j, i := range at {
		if errs != nil && errs[j] != nil {
			out[i] = driver.CancelResult{Err: errs[j]}
			continue
		}
		out[i].Written = true
	}
	return out
}

// CancelledState returns st as a Canceller stores it over prev: prev's
// TaskName, Attempt and CreatedAt kept, FinishedAt no earlier than that
// CreatedAt.
func CancelledState(st, prev *driver.TaskState) *driver.TaskState {
	c := st.Copy()
	c.TaskName, c.Attempt, c.CreatedAt = prev.TaskName, prev.Attempt, prev.CreatedAt
	c.Progress = prev.Progress
	if c.FinishedAt.Before(c.CreatedAt) {
		c.FinishedAt = c.CreatedAt
	}
	return c
}

// NotifyCancel tells every listener of the broker's server that
// taskUUIDs were cancelled (driver.CancelNotifier), under the portable
// checks; without the capability it does nothing (workers find the
// cancel at their next lease extension).
func (b *Broker) NotifyCancel(ctx context.Context, taskUUIDs []string) error {
	if b.Can.CancelNotifier == nil || len(taskUUIDs) == 0 {
		return nil
	}
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, b.Can.CancelNotifier.NotifyCancel(ctx, taskUUIDs))
}

// ListenCancel starts the broker's listener of cancel notices
// (driver.CancelNotifier.ListenCancel) under the portable checks. It
// returns an error satisfying errors.ErrUnsupported without the
// capability.
func (b *Broker) ListenCancel(ctx context.Context, notify func(taskUUIDs []string)) error {
	if b.Can.CancelNotifier == nil {
		return Unsupported("cancel notices", b.Drv)
	}
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, b.Can.CancelNotifier.ListenCancel(ctx, notify))
}

package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

// brokenCancel is the memory backend with a broken driver.Canceller, or
// a SetStates or WaitState that does not keep its promises about a
// cancel.
type brokenCancel struct {
	*memorybackend.Backend
	cancel    func(b *brokenCancel, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult
	setStates func(b *brokenCancel, ctx context.Context, sts []*errand.TaskState) []error
	waitState func(b *brokenCancel, ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error)
}

func (b *brokenCancel) Cancel(ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
	if b.cancel != nil {
		return b.cancel(b, ctx, sts)
	}
	return b.Backend.Cancel(ctx, sts)
}

func (b *brokenCancel) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	if b.setStates != nil {
		return b.setStates(b, ctx, sts)
	}
	return b.Backend.SetStates(ctx, sts)
}

func (b *brokenCancel) WaitState(ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error) {
	if b.waitState != nil {
		return b.waitState(b, ctx, id, done)
	}
	return b.Backend.WaitState(ctx, id, done)
}

func brokenCancelHarness(mod func(b *brokenCancel)) BackendHarness {
	h := healthyBackend()
	h.New = func(t testing.TB, expiry time.Duration) errand.Backend {
		b := &brokenCancel{Backend: memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})}
		mod(b)
		t.Cleanup(func() { b.Backend.Close() })
		return b
	}
	return h
}

// overwrite writes sts over whatever each task holds, a CANCELLED state
// included, as a plain SET would: the memory backend lets a PENDING
// replace a cancel, so each state goes in behind one, in one call.
func overwrite(be *memorybackend.Backend, ctx context.Context, sts ...*errand.TaskState) []error {
	var batch []*errand.TaskState
	for _, st := range sts {
		p := st.Copy()
		p.State = errand.StatePending
		batch = append(batch, p, st)
	}
	errs := be.SetStates(ctx, batch)
	if errs == nil {
		return nil
	}
	out := make([]error, len(sts))
	for i := range sts {
		out[i] = errors.Join(errs[2*i], errs[2*i+1])
	}
	return out
}

// cancelFromGo is Cancel as a read and then a plain write from Go, with a
// pause between them; overTerminal: it writes over a terminal state too;
// keep: the written state keeps the task's name, attempt and CreatedAt.
func cancelFromGo(b *brokenCancel, ctx context.Context, sts []*errand.TaskState, pause time.Duration, overTerminal, keep bool) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	for i, st := range sts {
		prev, err := b.Backend.GetState(ctx, st.TaskUUID)
		if err != nil {
			continue
		}
		out[i].Prev = prev
		if prev.State.Terminal() && !overTerminal {
			continue
		}
		time.Sleep(pause)
		c := st.Copy()
		if keep {
			c.TaskName, c.Attempt, c.CreatedAt = prev.TaskName, prev.Attempt, prev.CreatedAt
			c.FinishedAt = later(c.FinishedAt, c.CreatedAt)
		}
		if out[i].Err = errors.Join(overwrite(b.Backend, ctx, c)...); out[i].Err == nil {
			out[i].Written = true
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

var brokenCancels = map[string]BackendHarness{
	// Writes CANCELLED over any state the task has, a final one included.
	"cancel-over-terminal": brokenCancelHarness(func(b *brokenCancel) {
		b.cancel = func(b *brokenCancel, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
			return cancelFromGo(b, ctx, sts, 0, true, true)
		}
	}),
	// Writes the canceller's state as given: the task's name, attempt and
	// creation are lost.
	"cancel-resets-fields": brokenCancelHarness(func(b *brokenCancel) {
		b.cancel = func(b *brokenCancel, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
			return cancelFromGo(b, ctx, sts, 0, false, false)
		}
	}),
	// Reads, then writes in a second step: racing cancels all find the task
	// running, and a SUCCESS between the two is overwritten.
	"cancel-not-atomic": brokenCancelHarness(func(b *brokenCancel) {
		b.cancel = func(b *brokenCancel, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
			return cancelFromGo(b, ctx, sts, 2*time.Millisecond, false, true)
		}
	}),
	// A plain SET: a worker's late state replaces the cancel.
	"set-states-over-cancelled": brokenCancelHarness(func(b *brokenCancel) {
		b.setStates = func(b *brokenCancel, ctx context.Context, sts []*errand.TaskState) []error {
			return overwrite(b.Backend, ctx, sts...)
		}
	}),
	// A waiter that knows SUCCESS and FAILURE alone for final (machinery's
	// two): a cancel never wakes it.
	"waiter-ignores-cancelled": brokenCancelHarness(func(b *brokenCancel) {
		b.waitState = func(b *brokenCancel, ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error) {
			return b.Backend.WaitState(ctx, id, func(st *errand.TaskState) bool {
				return st.State != errand.StateCancelled && done(st)
			})
		}
	}),
	// A Canceller its harness does not declare.
	"undeclared-canceller": func() BackendHarness {
		h := healthyBackend()
		h.Caps.Cancel = false
		return h
	}(),
	// Starts by the table but takes SUCCESS and FAILURE alone for final:
	// a cancelled task starts.
	"start-restarts-cancelled": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			out := make([]driver.StartResult, len(reqs))
			for i, r := range reqs {
				prev, err := b.Backend.GetState(ctx, r.Started.TaskUUID)
				if err != nil {
					out[i] = b.Backend.Start(ctx, reqs[i:i+1])[0]
					continue
				}
				if prev.State != errand.StateCancelled {
					out[i] = b.Backend.Start(ctx, reqs[i:i+1])[0]
					continue
				}
				st := r.Started.Copy()
				st.CreatedAt, st.StartedAt = prev.CreatedAt, later(st.StartedAt, prev.CreatedAt)
				out[i] = driver.StartResult{Prev: prev, Err: errors.Join(overwrite(b.Backend, ctx, st)...), Written: true}
			}
			return out
		}
	}),
}

// The co-located memory pair, broken about a cancel.
var brokenCancelPairs = map[string]workerPair{
	// Acks only the deliveries whose state was written: a cancelled task's
	// message comes back after its lease.
	"colocation-settle-keeps-cancelled-message": carrierPair(func(c *memCarrier) {
		c.settle = func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
			errs, _ := checkAnswer("SetStates", len(sts), be.SetStates(ctx, sts))
			out := make([]error, len(ds))
			for i, d := range ds {
				if out[i] = errs[i]; out[i] == nil {
					out[i] = errors.Join(c.Broker.Ack(ctx, []*driver.Delivery{d})...)
				}
			}
			return out
		}
	}),
	// Writes each final state over whatever the task holds, then acks.
	"colocation-settle-over-cancelled": carrierPair(func(c *memCarrier) {
		c.settle = func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
			if err := errors.Join(overwrite(be, ctx, sts...)...); err != nil {
				return driver.BatchErrors(len(ds), err)
			}
			return c.Broker.Ack(ctx, ds)
		}
	}),
	// Follows the table but takes SUCCESS and FAILURE alone for final: a
	// cancelled task starts.
	"colocation-start-restarts-cancelled": carrierPair(func(c *memCarrier) {
		c.start = func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult {
			out := make([]*driver.StartResult, len(ds))
			for i, d := range ds {
				if !slices.Contains(tasks, d.Task) {
					continue
				}
				if prev, err := be.GetState(ctx, d.ID); err == nil && prev.State == errand.StateCancelled {
					st := &errand.TaskState{TaskUUID: d.ID, TaskName: d.Task, State: errand.StateStarted, Attempt: d.TaskAttempt, CreatedAt: prev.CreatedAt, StartedAt: later(at, prev.CreatedAt)}
					overwrite(be, ctx, st)
					out[i] = &driver.StartResult{Prev: prev, Written: true}
					continue
				}
				out[i] = startOne(be, ctx, d, at)
			}
			return out
		}
	}),
}

func init() {
	for name, h := range brokenCancels {
		brokenBackends[name] = h
	}
	for name, p := range brokenCancelPairs {
		brokenPairs[name] = p
	}
	backendTargets["Cancel/Table"] = "cancel-over-terminal"
	backendTargets["Cancel/KeepsTask"] = "cancel-resets-fields"
	backendTargets["Cancel/Concurrent"] = "cancel-not-atomic"
	backendTargets["Cancel/Sticky"] = "set-states-over-cancelled"
	backendTargets["Cancel/Wait"] = "waiter-ignores-cancelled"
	extraBackendTargets = append(extraBackendTargets,
		target{"Capabilities", "undeclared-canceller"},
		target{"Start/Table", "start-restarts-cancelled"},
	)
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Colocation/Settle", "pair:colocation-settle-keeps-cancelled-message"},
		target{"Colocation/Settle", "pair:colocation-settle-over-cancelled"},
		target{"Colocation/Start", "pair:colocation-start-restarts-cancelled"},
	)
}

// TestCancelTableFollowsTheRule: the kit's cancel table writes exactly
// over the states that are not terminal, as driver.Canceller says.
func TestCancelTableFollowsTheRule(t *testing.T) {
	t.Parallel()
	for _, r := range cancelRows() {
		if want := r.prev != "" && !r.prev.Terminal(); r.writes != want {
			t.Errorf("cancel row %q: writes=%v; driver.Canceller writes %v", r.prev, r.writes, want)
		}
	}
}

package conformance

// Broken variants of the memory drivers' cancel: the broker's notices
// (driver.CancelNotifier) and a backend's Canceller, for the self-test.

import (
	"context"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// noticeBroker is the memory broker with its NotifyCancel replaced.
type noticeBroker struct {
	*memorybroker.Broker
	notify func(b *noticeBroker, ctx context.Context, ids []string) error
}

func (b *noticeBroker) NotifyCancel(ctx context.Context, ids []string) error {
	return b.notify(b, ctx, ids)
}

// Colocate answers nil, as brokenBroker's does.
func (b *noticeBroker) Colocate(driver.Backend) driver.Colocation { return nil }

func brokenNoticeHarness(mod func(b *noticeBroker)) BrokerHarness {
	h := healthyBroker()
	h.New = func(t testing.TB) errand.Broker {
		b := &noticeBroker{Broker: memorybroker.New(nil)}
		mod(b)
		t.Cleanup(func() { b.Broker.Close() })
		return b
	}
	return h
}

// cancelBackend is the memory backend as a driver.Canceller (its own
// where it has one, else one made of GetState and SetStates), with its
// Cancel, GetState or GroupStates replaced.
type cancelBackend struct {
	*memorybackend.Backend
	cancel      func(b *cancelBackend, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult
	getState    func(b *cancelBackend, ctx context.Context, id string) (*errand.TaskState, error)
	groupStates func(b *cancelBackend, ctx context.Context, g string) ([]*errand.TaskState, error)
}

func (b *cancelBackend) Cancel(ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
	if b.cancel != nil {
		return b.cancel(b, ctx, sts)
	}
	return b.healthyCancel(ctx, sts)
}

// healthyCancel is the memory backend's own Cancel, or one made of
// GetState and SetStates where it has none.
func (b *cancelBackend) healthyCancel(ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
	if c, ok := any(b.Backend).(driver.Canceller); ok {
		return c.Cancel(ctx, sts)
	}
	return b.cancelWith(ctx, sts, func(prev *errand.TaskState) bool { return !prev.State.Terminal() }, true)
}

// cancelWith cancels through GetState and SetStates: it writes where
// write(prev) says, and stores what it writes when store.
func (b *cancelBackend) cancelWith(ctx context.Context, sts []*errand.TaskState, write func(prev *errand.TaskState) bool, store bool) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	for i, st := range sts {
		prev, err := b.Backend.GetState(ctx, st.TaskUUID)
		if err != nil {
			continue // unknown
		}
		out[i].Prev = prev
		if !write(prev) {
			continue
		}
		c := st.Copy()
		c.TaskName, c.Attempt, c.CreatedAt = prev.TaskName, prev.Attempt, prev.CreatedAt
		if c.FinishedAt.Before(c.CreatedAt) {
			c.FinishedAt = c.CreatedAt
		}
		if store {
			if err := set1(b.Backend, ctx, c); err != nil {
				out[i] = driver.CancelResult{Err: err}
				continue
			}
		}
		out[i].Written = !prev.State.Terminal()
	}
	return out
}

func (b *cancelBackend) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	if b.getState != nil {
		return b.getState(b, ctx, id)
	}
	return b.Backend.GetState(ctx, id)
}

func (b *cancelBackend) GroupStates(ctx context.Context, g string) ([]*errand.TaskState, error) {
	if b.groupStates != nil {
		return b.groupStates(b, ctx, g)
	}
	return b.Backend.GroupStates(ctx, g)
}

func brokenCancellerHarness(mod func(b *cancelBackend)) BackendHarness {
	h := healthyBackend()
	h.New = func(t testing.TB, expiry time.Duration) errand.Backend {
		b := &cancelBackend{Backend: memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})}
		mod(b)
		t.Cleanup(func() { b.Backend.Close() })
		return b
	}
	return h
}

// asFailure reads a CANCELLED state back as FAILURE (a machinery-format
// backend that stores a cancel as FAILURE and forgets to map it back).
func asFailure(st *errand.TaskState) *errand.TaskState {
	if st != nil && st.State == errand.StateCancelled {
		st = st.Copy()
		st.State = errand.StateFailure
	}
	return st
}

var brokenCancelBrokers = map[string]BrokerHarness{
	// Declares CancelNotify but its notices reach no one.
	"cancel-notices-lost": brokenNoticeHarness(func(b *noticeBroker) {
		b.notify = func(*noticeBroker, context.Context, []string) error { return nil }
	}),
	// Each notice carries only its first UUID: the other tasks it names
	// are never cancelled by it.
	"notice-keeps-first-uuid": brokenNoticeHarness(func(b *noticeBroker) {
		b.notify = func(b *noticeBroker, ctx context.Context, ids []string) error {
			return b.Broker.NotifyCancel(ctx, ids[:1])
		}
	}),
}

var brokenCancelBackends = map[string]BackendHarness{
	// Cancel answers written for a task not finished but stores nothing:
	// the task runs as if never cancelled.
	"cancel-not-stored": brokenCancellerHarness(func(b *cancelBackend) {
		b.cancel = func(b *cancelBackend, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
			return b.cancelWith(ctx, sts, func(prev *errand.TaskState) bool { return !prev.State.Terminal() }, false)
		}
	}),
	// Cancel writes CANCELLED over finished tasks too (and says it did
	// not): a cancel of a finished task loses its result.
	"cancel-overwrites-finished": brokenCancellerHarness(func(b *cancelBackend) {
		b.cancel = func(b *cancelBackend, ctx context.Context, sts []*errand.TaskState) []driver.CancelResult {
			return b.cancelWith(ctx, sts, func(*errand.TaskState) bool { return true }, true)
		}
	}),
	// Reads CANCELLED back as FAILURE.
	"cancel-read-as-failure": brokenCancellerHarness(func(b *cancelBackend) {
		b.getState = func(b *cancelBackend, ctx context.Context, id string) (*errand.TaskState, error) {
			st, err := b.Backend.GetState(ctx, id)
			return asFailure(st), err
		}
		b.groupStates = func(b *cancelBackend, ctx context.Context, g string) ([]*errand.TaskState, error) {
			sts, err := b.Backend.GroupStates(ctx, g)
			for i := range sts {
				sts[i] = asFailure(sts[i])
			}
			return sts, err
		}
	}),
}

func init() {
	for name, h := range brokenCancelBrokers {
		brokenBrokers[name] = h
	}
	for name, h := range brokenCancelBackends {
		brokenBackends[name] = h
	}
	brokerTargets["CancelNotify"] = "cancel-notices-lost"
	moreBrokerTargets["CancelNotify"] = "notice-keeps-first-uuid"
	for name, target := range map[string]string{
		"Cancel/Queued":        "backend:cancel-not-stored",
		"Cancel/Scheduled":     "backend:cancel-not-stored",
		"Cancel/Retrying":      "backend:cancel-not-stored",
		"Cancel/Running":       "broker:cancel-notices-lost",
		"Cancel/IgnoresCtx":    "broker:cancel-notices-lost",
		"Cancel/ChainStops":    "broker:cancel-notices-lost",
		"Cancel/ChordCallback": "backend:cancel-read-as-failure",
		"Cancel/GroupMember":   "backend:cancel-not-stored",
		"Cancel/Outcomes":      "backend:cancel-overwrites-finished",
	} {
		workerTargets[name] = target
	}
	extraWorkerTargets = append(extraWorkerTargets, target{"Cancel/ChordCallback", "broker:cancel-notices-lost"})
}

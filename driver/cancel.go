package driver

import "context"

// Cancelling a task. errand's Server.Cancel records CANCELLED in the
// backend and then tells the workers: a task not yet started never starts
// (a Starter refuses a terminal state, and a worker that reads one settles
// the message without running it), and a running task's worker cancels its
// ctx when it learns of it, from a broker's notice ([CancelNotifier]) or,
// on every broker, from the backend at the task's next lease extension.

// Canceller is implemented by backends that record a cancel in one atomic
// step and keep it: once a task is CANCELLED, no later write replaces that
// state. errand cancels through the portable path on a backend without
// it (read the state, then write CANCELLED with SetStates), where a
// worker's write that lands after the cancel may replace it.
//
// The promise covers every write of the backend: SetStates (and a
// co-located Settle, see [Colocation]) does not write a state, other than
// PENDING, over a task's CANCELLED state and answers an error wrapping
// ErrCancelled for it (the batch's other states are written); a PENDING
// may replace it (a task sent again under its UUID: errand never writes
// PENDING over a task it knows). A [Starter] already refuses it (a
// terminal state). Expiry still removes a CANCELLED state, like any other.
//
// Cancel may be called concurrently with every other method.
type Canceller interface {
	// Cancel records sts[i] (state CANCELLED, with the task's UUID and
	// the canceller's Error, CreatedAt and FinishedAt), in one atomic step
	// per task, unless the task has no state (it is unknown, or its state
	// expired) or its state is terminal (SUCCESS, FAILURE, CANCELLED). It
	// answers one result per state, in order; when it writes, the stored
	// state keeps prev's TaskName, Attempt and CreatedAt (and FinishedAt
	// is no earlier than that CreatedAt), restarting its result expiry as
	// SetStates does. A call that fails as a whole sets the same Err on
	// every result.
	Cancel(ctx context.Context, sts []*TaskState) []CancelResult
}

// CancelResult is a Canceller's answer for one state.
type CancelResult struct {
	// Prev is the task's state before the call, nil when it had none.
	Prev *TaskState
	// Written: CANCELLED was stored (Prev is then not nil and not
	// terminal).
	Written bool
	// Err, when not nil, says the cancel failed: Prev and Written then
	// mean nothing.
	Err error
}

// CancelNotifier is implemented by brokers that can tell every consumer at
// once that tasks were cancelled (Redis PUBLISH, PostgreSQL NOTIFY, a
// memory broker's subscribers), so a worker running one of them cancels
// it at once instead of at its next lease extension. Notices are a fast
// path, not the record: errand writes CANCELLED in the backend before it
// notifies, a notice may be lost (a listener reconnecting, a process
// starting), and a worker that misses one finds the cancel at the next
// lease extension.
//
// Both methods may be called concurrently, and return an error, never
// panic or block, after Close.
type CancelNotifier interface {
	// NotifyCancel sends one notice naming taskUUIDs (not empty) to every
	// listener of the broker's server, in one call.
	NotifyCancel(ctx context.Context, taskUUIDs []string) error

	// ListenCancel starts calling notify with the UUIDs of each notice
	// sent after it returned, until ctx is done or the broker is closed,
	// and returns once it listens (an error, and no listening, when it
	// cannot). notify is called from one goroutine of the broker's, one
	// call at a time, and must not block; ListenCancel's goroutine has
	// returned by the time Close does. A listener that loses its
	// connection reconnects on its own; notices sent while it is away are
	// lost.
	ListenCancel(ctx context.Context, notify func(taskUUIDs []string)) error
}

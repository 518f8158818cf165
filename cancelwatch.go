package errand

import (
	"context"
	"fmt"
	"sync"

	"github.com/errand-go/errand/internal/portable"
)

// How a worker learns that a task it holds was cancelled (Server.Cancel
// records CANCELLED first, then notifies):
//
//   - at once, from the broker's notices (driver.CancelNotifier), on a
//     broker that sends them: the watch listens from the worker's Start
//     until its calls end, and a notice naming a task the worker holds
//     cancels it (one naming a task it does not hold is ignored);
//   - on every broker, at each lease extension of a running task: the
//     lease extender tells the delivery of each successful renewal
//     (lease.Extension.OnRenew), on the renewal's own goroutine, and the
//     delivery reads its task's state there (delivery.Renewed). No
//     goroutine and no timer of its own: the check rides the renewal
//     that already runs every ExtendEvery, so a cancel reaches a running
//     task within ExtendEvery (plus one state read) on any broker;
//   - before it runs, from the state its start reads (a Starter refuses
//     a terminal state; resume sees CANCELLED).
//
// A cancelled task's ctx is cancelled with a cause wrapping ErrCancelled,
// and whatever its attempt returns is discarded (process.go).

// cancelParams are what a cancel watch needs of its worker.
type cancelParams struct {
	broker *portable.Broker
	// calls ends the listening (the worker's calls: cancelled last, when
	// Shutdown is done or the settle grace is over).
	calls  context.Context
	report func(err error, msg string, attrs ...any)
}

// cancelWatch holds the deliveries of a worker that a cancel notice can
// reach, by task UUID, and listens for notices on a broker that sends
// them. It owns one goroutine, which starts the listening and returns
// (the listener itself is the broker's, ended with calls); wait returns
// once it has. The fetch loop begins once the listening has (listening).
type cancelWatch struct {
	cancelParams
	mu    sync.Mutex
	held  map[string][]*delivery // decoded deliveries in hand, by task UUID
	wg    sync.WaitGroup
	ready chan struct{} // closed once ListenCancel returned (or there is nothing to listen to)
}

func newCancelWatch(p cancelParams) *cancelWatch {
	return &cancelWatch{cancelParams: p, held: map[string][]*delivery{}, ready: make(chan struct{})}
}

// start begins listening for notices, in the background, on a broker
// that sends them: a listener that cannot start is reported, and the
// worker relies on the lease extension's check alone.
func (cw *cancelWatch) start() {
	if cw.broker.Can.CancelNotifier == nil {
		close(cw.ready)
		return
	}
	cw.wg.Go(func() {
		defer close(cw.ready)
		if err := cw.broker.ListenCancel(cw.calls, cw.notified); err != nil && cw.calls.Err() == nil {
			cw.report(fmt.Errorf("errand: listen for cancel notices: %w", err), "errand: cancel notices not heard; running tasks are cancelled at their next lease extension")
		}
	})
}

// listening returns once the listener listens (or could not), or ctx is
// done: the fetch loop waits for it, so that a cancel recorded after a
// task's start read its state has its notice heard.
func (cw *cancelWatch) listening(ctx context.Context) {
	select {
	case <-cw.ready:
	case <-ctx.Done():
	}
}

// wait returns once start's goroutine has returned.
func (cw *cancelWatch) wait() { cw.wg.Wait() }

// add makes dv reachable by a notice naming its task.
func (cw *cancelWatch) add(dv *delivery) {
	cw.mu.Lock()
	cw.held[dv.sig.UUID] = append(cw.held[dv.sig.UUID], dv)
	cw.mu.Unlock()
}

// remove ends what add began.
func (cw *cancelWatch) remove(dv *delivery) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	id := dv.sig.UUID
	ds := cw.held[id]
	for i, d := range ds {
		if d == dv {
			ds = append(ds[:i], ds[i+1:]...)
			break
		}
	}
	if len(ds) == 0 {
		delete(cw.held, id)
	} else {
		cw.held[id] = ds
	}
}

// notified is the broker's listener's callback: it cancels the held
// tasks taskUUIDs name, without blocking.
func (cw *cancelWatch) notified(taskUUIDs []string) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for _, id := range taskUUIDs {
		for _, dv := range cw.held[id] {
			dv.cancel.set(cancelCause(dv.sig, "a cancel notice"))
		}
	}
}

// cancelCause is the cause a cancelled task's ctx is cancelled with.
func cancelCause(sig *Signature, how string) error {
	return fmt.Errorf("errand: task %s (%s) cancelled (learnt from %s): %w", sig.Name, sig.UUID, how, ErrCancelled)
}

// cancelMark is a delivery's cancel: set once, by a notice or by the
// check at a lease renewal, and passed to the task's ctx while it runs.
type cancelMark struct {
	mu     sync.Mutex
	cause  error
	cancel context.CancelCauseFunc // the running attempt's ctx; nil before and after it runs
}

// set records cause (the first one counts) and cancels the running
// attempt's ctx with it.
func (m *cancelMark) set(cause error) {
	m.mu.Lock()
	if m.cause != nil {
		m.mu.Unlock()
		return
	}
	m.cause = cause
	cancel := m.cancel
	m.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// follow has cancel called with the cause once the task is cancelled (at
// once when it is already), until unfollow.
func (m *cancelMark) follow(cancel context.CancelCauseFunc) {
	m.mu.Lock()
	cause := m.cause
	m.cancel = cancel
	m.mu.Unlock()
	if cause != nil {
		cancel(cause)
	}
}

func (m *cancelMark) unfollow() {
	m.mu.Lock()
	m.cancel = nil
	m.mu.Unlock()
}

// err returns the cancel's cause, nil while the task is not known
// cancelled.
func (m *cancelMark) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cause
}

// Renewed is told of each successful renewal of the delivery's lease
// while its task runs (lease.Extension.OnRenew): it reads the task's
// state and cancels the task when it is CANCELLED. A failed read is left
// to the next renewal.
func (dv *delivery) Renewed(ctx context.Context) {
	if dv.cancel.err() != nil {
		return
	}
	st, err := dv.w.srv.backend.GetState(ctx, dv.sig.UUID)
	if err == nil && st.State == StateCancelled {
		dv.cancel.set(cancelCause(dv.sig, "its state at a lease extension"))
	}
}

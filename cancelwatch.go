package errand

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
//     task within ExtendEvery (plus one state read) on any broker. While
//     those reads fail (the backend unreachable), the worker's checks
//     back off together (checkPace): a cancel then reaches a running task
//     within 8×ExtendEvery of the backend's return at most;
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
	every  time.Duration // WorkerConfig.ExtendEvery: the checks' pace
}

// cancelWatch holds the deliveries of a worker that a cancel notice can
// reach, by task UUID, and listens for notices on a broker that sends
// them. It owns one goroutine, which starts the listening and returns
// (the listener itself is the broker's, ended with calls); wait returns
// once it has. The fetch loop begins once the listening has (listening).
type cancelWatch struct {
	cancelParams
	mu   sync.Mutex
	held map[string]*delivery // decoded deliveries in hand, by task UUID
	// more holds the other deliveries of a UUID held twice (two messages
	// of one task in hand at once: rare), so that held costs a task no
	// allocation of its own.
	more  map[string][]*delivery
	wg    sync.WaitGroup
	ready chan struct{} // closed once ListenCancel returned (or there is nothing to listen to)
	pace  checkPace     // the state reads at lease renewals (Renewed)
}

func newCancelWatch(p cancelParams) *cancelWatch {
	return &cancelWatch{cancelParams: p, held: map[string]*delivery{}, ready: make(chan struct{}), pace: checkPace{every: p.every}}
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
	id := dv.sig.UUID
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if _, ok := cw.held[id]; !ok {
		cw.held[id] = dv
		return
	}
	if cw.more == nil {
		cw.more = map[string][]*delivery{}
	}
	cw.more[id] = append(cw.more[id], dv)
}

// remove ends what add began.
func (cw *cancelWatch) remove(dv *delivery) {
	id := dv.sig.UUID
	cw.mu.Lock()
	defer cw.mu.Unlock()
	ds := cw.more[id]
	if cw.held[id] == dv {
		if len(ds) == 0 {
			delete(cw.held, id)
			return
		}
		cw.held[id], ds = ds[0], ds[1:]
	} else {
		for i, d := range ds {
			if d == dv {
				ds = append(ds[:i:i], ds[i+1:]...)
				break
			}
		}
	}
	if len(ds) == 0 {
		delete(cw.more, id)
	} else {
		cw.more[id] = ds
	}
}

// notified is the broker's listener's callback: it cancels the held
// tasks taskUUIDs name, without blocking.
func (cw *cancelWatch) notified(taskUUIDs []string) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for _, id := range taskUUIDs {
		if dv := cw.held[id]; dv != nil {
			dv.cancel.notice(cancelCause(dv.sig, "a cancel notice"))
		}
		for _, dv := range cw.more[id] {
			dv.cancel.notice(cancelCause(dv.sig, "a cancel notice"))
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
	mu         sync.Mutex
	cause      error
	fromNotice bool                    // a notice set it (notice), not the backend's state
	cancel     context.CancelCauseFunc // the running attempt's ctx; nil before and after it runs
}

// notice is set for a cancel learnt from a broker's notice: the backend's
// state may since have been replaced by the attempt's own start (on the
// portable path), so the worker records CANCELLED again (noticed).
func (m *cancelMark) notice(cause error) { m.mark(cause, true) }

// noticed reports whether the cancel was learnt from a notice.
func (m *cancelMark) noticed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fromNotice
}

// set records cause (the first one counts) and cancels the running
// attempt's ctx with it.
func (m *cancelMark) set(cause error) { m.mark(cause, false) }

func (m *cancelMark) mark(cause error, fromNotice bool) {
	m.mu.Lock()
	if m.cause != nil {
		m.mu.Unlock()
		return
	}
	m.cause, m.fromNotice = cause, fromNotice
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
// while its task runs (lease.Extension.OnRenew): it renews the task's
// concurrency slots (concurrency.go), then, unless the worker's checks
// are backing off (checkPace), reads the task's state and cancels the
// task when it is CANCELLED. A failed read is left to a later renewal.
func (dv *delivery) Renewed(ctx context.Context) {
	dv.renewSlots(ctx)
	if dv.cancel.err() != nil {
		return
	}
	pace := &dv.w.cancels.pace
	began := time.Now()
	if !pace.begin(began) {
		return
	}
	st, err := dv.w.srv.backend.GetState(ctx, dv.sig.UUID)
	pace.end(began, time.Now(), err)
	if err == nil && st.State == StateCancelled {
		dv.cancel.set(cancelCause(dv.sig, "its state at a lease extension"))
	}
}

// maxCheckBackoff bounds checkPace's backoff, in ExtendEvery.
const maxCheckBackoff = 8

// checkPace paces a worker's state reads at lease renewals (Renewed)
// while they fail. In an outage of the backend every running task would
// otherwise read once per ExtendEvery into it: with N tasks, N failed
// calls per ExtendEvery, which find no cancel (Server.Cancel cannot
// record one either) and cost the clients that count failures: go-redis,
// once PoolSize dials have failed, fails every call of the client (the
// producer's result waits on a shared one among them) until a background
// dial succeeds, up to a second after the server is back. So a failed
// read makes every renewal of the worker skip its read for a backoff
// (ExtendEvery, doubling with each failure in a row up to
// maxCheckBackoff×ExtendEvery); then one renewal reads (a probe, the
// others still skip) and its success ends the backoff. The reads already
// under way when one fails count as that one failure. An ErrTaskNotFound
// is an answer, not a failure. A pure policy of its inputs: the caller
// passes the clock.
type checkPace struct {
	every    time.Duration
	mu       sync.Mutex
	fails    int       // failures in a row; 0: reads go ahead
	failedAt time.Time // when the last one was counted
	next     time.Time // while failing, no read before it
	probing  bool      // while failing, a read is under way
}

// begin reports whether a check may read now; one that may calls end.
func (p *checkPace) begin(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.fails == 0:
		return true
	case p.probing || now.Before(p.next):
		return false
	}
	p.probing = true
	return true
}

// end records how a read begun at began ended, at now.
func (p *checkPace) end(began, now time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, ErrTaskNotFound):
		p.fails, p.probing = 0, false
	case p.fails > 0 && !began.After(p.failedAt):
		// Under way when a failure was counted: part of that one.
	default:
		p.fails++
		p.failedAt, p.probing = now, false
		p.next = now.Add(checkBackoff(p.every, p.fails))
	}
}

// checkBackoff is how long the checks skip their reads after the fails-th
// failure in a row: every, doubling with each, at most
// maxCheckBackoff×every.
func checkBackoff(every time.Duration, fails int) time.Duration {
	return every * time.Duration(min(1<<min(fails-1, 16), maxCheckBackoff))
}

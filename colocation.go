package errand

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/coalesce"
	"github.com/errand-go/errand/internal/portable"
)

// Co-location (driver.Colocator): where the broker and the backend keep
// their data on one server (errand's Redis drivers on one Redis node, its
// memory drivers), NewServer asks the broker once for its one-trip calls
// for the backend (Server.coloc), and three paths take one trip instead
// of two. Every other pair, and every other case, takes the portable
// path, with the same outcome.
//
//   - Send (send.go): SendTask under a UUID it made itself records PENDING
//     and publishes in one call, joined with the sends of concurrent
//     callers to the same queue (newFreshSender).
//   - FetchStart: a worker's fetch, of one queue or of each of several,
//     leases the due messages and, in the same step, begins the attempt
//     of each whose task this server can run now (registered, without a
//     rate limit: startableTasks, any number) by driver.Starter's table.
//     The delivery reaches its runner with its start decided (delivery.start),
//     and beginColocated takes it from there as begin takes a Starter's
//     answer: no Start call before the function runs. A delivery the
//     fetch did not start (another task, a message sent without its
//     task's name, a task over a rate limit) takes the usual path.
//   - Settle: a task that succeeded and that nothing follows — no
//     OnSuccess callbacks, no chord group to complete, no unique key to
//     free (quiet) — records SUCCESS and is acked in one call, joined with
//     the settles of concurrent slots of its queue as acks are joined
//     (internal/portable/batch.go), instead of a SetStates and then an
//     Ack. The order of the two-call path is kept: the state is written
//     before the message leaves the queue, so a redelivery (after a lost
//     lease) finds SUCCESS and runs nothing again.

// colocated is a server's co-location with its backend: the broker's
// one-trip calls, the coalescers joining concurrent sends and settles into
// them, and the task names FetchStart may start.
type colocated struct {
	calls   driver.Colocation
	sends   *coalesce.Coalescer[freshSend, bool]           // SendTask's fresh sends, per queue
	settles *coalesce.Coalescer[colocatedSettle, struct{}] // quiet successes, per queue
	// startable caches startableTasks (nil: to be made again).
	startable atomic.Pointer[[]string]
}

// colocatedSettle is one delivery to ack with its task's final state.
type colocatedSettle struct {
	d  *driver.Delivery
	st *TaskState
}

// newColocatedSettler returns the coalescer of settles over s.coloc.calls.
// Server.Close closes it.
func (s *Server) newColocatedSettler() *coalesce.Coalescer[colocatedSettle, struct{}] {
	return coalesce.New(coalesce.Config[colocatedSettle, struct{}]{
		Flights: portable.AckFlightsOf(s.broker.Limits()), Limit: s.broker.Limits().MaxAckBatch, AnswerTaken: true, Closed: ErrClosed,
		Run: func(ctx context.Context, _ string, reqs []colocatedSettle, _ []struct{}, errs []error) {
			var ds []*driver.Delivery
			var sts []*TaskState
			if n := len(reqs); n <= len(settleBufs{}.ds) {
				b := new(settleBufs) // both slices in one allocation
				ds, sts = b.ds[:n:n], b.sts[:n:n]
			} else {
				ds, sts = make([]*driver.Delivery, n), make([]*TaskState, n)
			}
			for i, r := range reqs {
				ds[i], sts[i] = r.d, r.st
			}
			copy(errs, portable.CheckBatch(s.broker.Drv, "Colocation.Settle", len(ds), s.coloc.calls.Settle(ctx, ds, sts)))
		},
	})
}

// settleBufs holds the slices of a co-located settle of up to 8 deliveries.
type settleBufs struct {
	ds  [8]*driver.Delivery
	sts [8]*TaskState
}

// quiet reports whether nothing follows sig's success but its ack: no
// OnSuccess callbacks, no chord group to complete, no unique key to free
// (afterSuccess would call nothing).
func quiet(sig *Signature) bool {
	return len(sig.OnSuccess) == 0 && sig.UniqueKey == "" && (sig.GroupUUID == "" || sig.ChordCallback == nil)
}

// settleColocated records dv.stateInAck, the task's final state st, and acks
// its delivery d in one Colocation.Settle call. A lost lease
// is reported (st was written: the redelivery finds it); any other error
// leaves d unacked, its state perhaps unwritten, and gives it back after
// ErrorBackoff, as a failed SUCCESS write does on the two-call path.
func (dv *delivery) settleColocated(ctx context.Context) {
	w, d, st, attrs := dv.w, dv.d, dv.stateInAck, dv.attrs
	s := w.srv
	err := s.broker.Before(ctx)
	if err == nil {
		err = s.backend.Before(ctx)
	}
	if err == nil {
		_, err = s.coloc.settles.Do(ctx, d.Queue, colocatedSettle{d, st})
		err = s.broker.After(ctx, err)
	}
	switch {
	case err == nil:
	case errors.Is(err, driver.ErrCancelled):
		// Cancelled before its SUCCESS landed: not written, the delivery
		// acked (driver.Colocation.Settle), and nothing follows a quiet
		// task's cancel (afterCancel would call nothing).
	case errors.Is(err, driver.ErrLeaseLost):
		w.report(err, "errand: ack", attrs()...)
	default:
		w.report(fmt.Errorf("errand: task %s (%s): set SUCCESS and ack: %w", st.TaskName, st.TaskUUID, err), "errand: task requeued after an error", attrs()...)
		if err := s.broker.Release(ctx, d, time.Now().Add(w.cfg.ErrorBackoff)); err != nil {
			w.report(err, "errand: release", attrs()...)
		}
	}
}

// startableTasks returns the names of the tasks a co-located fetch may
// start: registered, without a rate limit (a task over its limit must not
// be recorded STARTED), in name order. The slice is the same until a
// Register changes the tasks, so a broker may cache what it makes of it.
func (s *Server) startableTasks() []string {
	if p := s.coloc.startable.Load(); p != nil {
		return *p
	}
	// Made and stored under the read lock: a Register, which clears it
	// under the write lock, cannot come between.
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.tasks))
	for name, t := range s.tasks {
		if t.limit == nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	s.coloc.startable.Store(&names)
	return names
}

// forgetStartable drops the cached startable names after a Register.
// s.mu is held for writing.
func (s *Server) forgetStartable() {
	if s.coloc != nil {
		s.coloc.startable.Store(nil) // startableTasks makes it again
	}
}

// fetch fetches up to limit deliveries of queue for w: with
// Colocation.FetchStart where the server is co-located, under the checks
// Fetch makes, else with Fetch. starts[i] answers for ds[i] (nil: not
// started; starts nil: none started), at is when the broker started them.
// An answer with a start count other than the deliveries' is the driver's
// bug: the deliveries take the usual path (a start the broker did make is
// then found by Start as a state to follow), and the error is reported.
func (w *Worker) fetch(queue string, limit int) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	s, b := w.srv, w.srv.broker
	if s.coloc == nil {
		ds, err := b.Fetch(w.fetchCtx, queue, limit, w.cfg.Lease)
		return ds, nil, time.Time{}, err
	}
	ctx := w.fetchCtx
	if err := b.Before(ctx); err != nil {
		return nil, nil, time.Time{}, err
	}
	ds, starts, at, err := s.coloc.calls.FetchStart(ctx, queue, max(limit, 1), w.cfg.Lease, s.startableTasks())
	if starts != nil && len(starts) != len(ds) {
		if err == nil {
			err = fmt.Errorf("errand: broker %T broke the driver.Colocation contract: FetchStart answered %d starts for %d deliveries", b.Drv, len(starts), len(ds))
		}
		starts = nil
	}
	return ds, starts, at, b.After(ctx, err)
}

// beginColocated is begin for a delivery whose attempt the fetch started
// (dv.start): it reports whether the attempt runs, as begin does. The
// start is checked first: it must be readable, of the task the body
// decodes to (the message's ID, Task and TaskAttempt are sig's; a message
// whose ID names another task is set aside, that task's state put back),
// and written exactly when driver.Starter's table allows it; a start that
// is not is an error and the delivery goes back to the broker.
func (dv *delivery) beginColocated(cannotRun error) bool {
	w, sig, d, res := dv.w, dv.sig, dv.d, dv.start
	now := dv.startAt.UTC()
	dv.st = dv.state(0, &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: StateReceived, Attempt: sig.attempt(), CreatedAt: now})
	dv.started = dv.state(1, dv.st)
	dv.started.State, dv.started.StartedAt = StateStarted, now
	req := driver.StartRequest{Received: dv.st, Started: dv.started, FirstDelivery: d.Attempt == 1}
	switch {
	case res.Err != nil:
		dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: task %s (%s): its start in the fetch: %w", sig.Name, sig.UUID, res.Err)
		return false
	case sig.UUID != d.ID || sig.Name != d.Task || sig.attempt() != d.TaskAttempt:
		// The message's ID names another task than its body does (a
		// producer publishing a body under another task's ID or name): the
		// fetch began that other task, perhaps a chord's callback. Put its
		// state back and set the message aside; every delivery of it
		// would do the same.
		dv.unstart()
		dv.outcome, dv.err = settleSetAside, fmt.Errorf("%w: message %q on queue %q is task %s (%s, attempt %d) but its ID names task %q (%s, attempt %d), which the broker's fetch began: that task's state is put back; not run, set aside",
			ErrUUIDConflict, d.ID, d.Queue, sig.Name, sig.UUID, sig.attempt(), d.Task, d.ID, d.TaskAttempt)
		return false
	case res.Written != req.Allows(res.Prev):
		dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: broker %T broke the driver.Colocation contract: FetchStart of task %s with previous state %s (attempt %d): written %v, want %v",
			w.srv.broker.Drv, sig.UUID, portable.StateName(res.Prev), portable.AttemptOf(res.Prev), res.Written, !res.Written)
		return false
	case !res.Written:
		ctx, cancel := w.call() // a step of its own, as every call is
		defer cancel()
		done, outcome, err := w.resume(ctx, sig, res.Prev, d)
		if !done { // the table was checked above: not reached
			outcome, err = settleRequeue, fmt.Errorf("errand: task %s (%s): the broker did not start a task in state %s", sig.Name, sig.UUID, res.Prev.State)
		}
		dv.outcome, dv.err = outcome, err
		return false
	}
	if prev := res.Prev; prev != nil { // as the fetch wrote them (driver.Colocation.FetchStart)
		dv.st.CreatedAt, dv.started.CreatedAt = prev.CreatedAt, prev.CreatedAt
		dv.started.StartedAt = notBefore(now, prev.CreatedAt)
	}
	if dv.tk == nil { // not reached: the fetch starts registered tasks only
		cannotRun = fmt.Errorf("%w %q (task %s): no function is registered under that name on this worker", ErrUnknownTask, sig.Name, sig.UUID)
	}
	if cannotRun != nil { // bad arguments: STARTED is recorded, FAILURE follows it
		ctx, cancel := w.call()
		defer cancel()
		dv.outcome, _, dv.err = w.fail(ctx, sig, dv.started, cannotRun)
		return false
	}
	return true
}

// unstart puts back the state a co-located fetch replaced with STARTED, for
// a delivery the worker sets aside undecoded (it never ran): the previous
// state, or RECEIVED when there was none. A STARTED left behind would make
// the message's re-drive from the archive, a first delivery, look like a
// second message under a running UUID (uuidConflict), set aside again. A
// failed write is reported.
func (dv *delivery) unstart() {
	res, d := dv.start, dv.d
	if res == nil || !res.Written {
		return
	}
	st := res.Prev
	if st == nil {
		st = &TaskState{TaskUUID: d.ID, TaskName: d.Task, State: StateReceived, Attempt: d.TaskAttempt, CreatedAt: dv.startAt.UTC()}
	}
	ctx, cancel := dv.w.call()
	defer cancel()
	if err := dv.w.srv.backend.SetState(ctx, st); err != nil {
		dv.w.report(fmt.Errorf("errand: task %s (%s): put back its state %s after its start in the fetch: %w", d.Task, d.ID, st.State, err), "errand: delivery set aside")
	}
}

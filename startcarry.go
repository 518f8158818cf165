package errand

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
)

// One round trip in, where the broker can carry the backend's writes
// (driver.StartCarrier: errand's Redis broker and Redis backend on one
// Redis node): a worker on one queue fetches with the carrier, which
// leases the due messages and, in the same step, begins the attempt of
// each whose task this server can run now (registered, without a rate
// limit: startableTasks) by driver.Starter's table. The delivery reaches
// its runner with its start decided (job.start), and begin takes it from
// there as it takes a Starter's answer: no Start call, no second round
// trip before the function runs. A delivery the fetch did not start
// (another task, a message sent without its task's name, a task over a
// rate limit) takes the usual path. A worker on several queues fetches
// without the carrier.

// maxStartable is the most task names a carried fetch is given: a server
// with more registered lets the fetch start the first maxStartable by
// name, and the others take the usual path.
const maxStartable = 64

// startableTasks returns the names of the tasks a carried fetch may
// start: registered, without a rate limit (a task over its limit must not
// be recorded STARTED), at most maxStartable, in name order.
func (s *Server) startableTasks() []string {
	if p := s.startable.Load(); p != nil {
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
	if len(names) > maxStartable {
		names = names[:maxStartable]
	}
	s.startable.Store(&names)
	return names
}

// fetchStarted fetches up to limit deliveries of queue with the carrier
// under the checks Fetch makes; starts[i] answers for ds[i] (nil: not
// started), at is when the broker started them. An answer with a start
// count other than the deliveries' is the driver's bug: the deliveries
// take the usual path (a start the carrier did make is then found by
// Start as a state to follow), and the error is reported.
func (b *broker) fetchStarted(ctx context.Context, fetch driver.FetchStartFunc, queue string, limit int, lease time.Duration, spec driver.StartSpec) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	if err := b.before(ctx); err != nil {
		return nil, nil, time.Time{}, err
	}
	ds, starts, at, err := fetch(ctx, queue, max(limit, 1), lease, spec)
	if starts != nil && len(starts) != len(ds) {
		if err == nil {
			err = fmt.Errorf("errand: broker %T broke the driver.FetchStartFunc contract: %d starts for %d deliveries", b.drv, len(starts), len(ds))
		}
		starts = nil
	}
	return ds, starts, at, b.after(ctx, err)
}

// beginCarried is begin for a delivery whose attempt the fetch started
// (dv.start): it reports whether the attempt runs, as begin does. The
// start is checked first: it must be readable, of the task the body
// decodes to (the message's ID, Task and TaskAttempt are sig's; a message
// whose ID names another task is set aside, that task's state put back),
// and written exactly when driver.Starter's table allows it; a start that
// is not is an error and the delivery goes back to the broker.
func (dv *delivery) beginCarried(cannotRun error) bool {
	w, sig, d, res := dv.w, dv.sig, dv.d, dv.start
	now := dv.startAt.UTC()
	dv.st = dv.state(0, &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: StateReceived, Attempt: sig.attempt(), CreatedAt: now})
	dv.started = dv.state(1, dv.st)
	dv.started.State, dv.started.StartedAt = StateStarted, now
	req := driver.StartRequest{Received: dv.st, Started: dv.started, FirstDelivery: d.Attempt == 1}
	switch {
	case res.Err != nil:
		dv.outcome, dv.err = requeue, fmt.Errorf("errand: task %s (%s): its start in the fetch: %w", sig.Name, sig.UUID, res.Err)
		return false
	case sig.UUID != d.ID || sig.Name != d.Task || sig.attempt() != d.TaskAttempt:
		// The message's ID names another task than its body does (a
		// producer publishing a body under another task's ID or name): the
		// fetch began that other task, perhaps a chord's callback. Put its
		// state back and set the message aside; every delivery of it
		// would do the same.
		dv.unstart()
		dv.outcome, dv.err = setAside, fmt.Errorf("%w: message %q on queue %q is task %s (%s, attempt %d) but its ID names task %q (%s, attempt %d), which the broker's fetch began: that task's state is put back; not run, set aside",
			ErrUUIDConflict, d.ID, d.Queue, sig.Name, sig.UUID, sig.attempt(), d.Task, d.ID, d.TaskAttempt)
		return false
	case res.Written != req.Allows(res.Prev):
		dv.outcome, dv.err = requeue, fmt.Errorf("errand: broker %T broke the driver.FetchStartFunc contract: task %s with previous state %s (attempt %d): written %v, want %v",
			w.srv.broker.drv, sig.UUID, stateName(res.Prev), attemptOf(res.Prev), res.Written, !res.Written)
		return false
	case !res.Written:
		ctx, cancel := w.call() // a step of its own, as every call is
		defer cancel()
		done, outcome, err := w.resume(ctx, sig, res.Prev, d)
		if !done { // the table was checked above: not reached
			outcome, err = requeue, fmt.Errorf("errand: task %s (%s): the broker did not start a task in state %s", sig.Name, sig.UUID, res.Prev.State)
		}
		dv.outcome, dv.err = outcome, err
		return false
	}
	if prev := res.Prev; prev != nil { // as the fetch wrote them (driver.FetchStartFunc)
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

// unstart puts back the state a carried fetch replaced with STARTED, for
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
	if err := dv.w.srv.backend.setState(ctx, st); err != nil {
		dv.w.report(fmt.Errorf("errand: task %s (%s): put back its state %s after its start in the fetch: %w", d.Task, d.ID, st.State, err), "errand: delivery set aside")
	}
}

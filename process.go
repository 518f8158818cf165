package errand

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/lease"
)

// The task state machine: what a worker does with one delivery, from
// decoding it to settling it, as methods of the delivery's own value.

// delivery is one delivery in a worker's hands, from its fetch to its
// settling: the driver's delivery and what the fetch learnt of it (its
// queue, the renewal of its lease, when it was fetched, the start a
// co-located fetch made), then, on its runner, its decoded task, the
// attempt, and how it is settled. The fetch loop makes it and hands it to
// a runner; from handle to its settling it is used by that goroutine
// alone.
type delivery struct {
	w *Worker // set by handle
	d *driver.Delivery
	// q is its queue in a worker on several queues (nil otherwise: no
	// policy to tell), ext its lease's renewal when it was started at
	// fetch time, got when its Fetch call returned (its lease began just
	// before).
	q   *workerQueue
	ext *lease.Extension
	got time.Time
	// start is the co-located fetch's start of d's attempt at startAt
	// (colocation.go); nil when the fetch did not start it.
	start   *driver.StartResult
	startAt time.Time

	sig   *Signature      // nil until decoded
	lease lease.Extension // dv.ext when the runner starts its renewals (handle)
	slots *heldSlots      // its attempt's concurrency slots (concurrency.go); nil: none taken
	queue string          // the queue its retries and callbacks go to

	// The attempt: the task's function and arguments, and the states it
	// records (RECEIVED and STARTED before the middleware runs).
	tk          *task
	args        []reflect.Value
	st, started *TaskState
	states      [3]TaskState // where st, started and the final state are (state)
	stateInAck  *TaskState   // SUCCESS, to record in the ack's call (colocation.go); nil: recorded already
	// The attempt's ctx (taskContext) and what cancels it (endTask).
	cancelTask                    context.CancelCauseFunc
	prog                          progressWriter // its progress (progress.go)
	cancelTimeout, cancelDeadline context.CancelFunc
	cancel                        cancelMark  // its task's cancel, once known (cancelwatch.go)
	outcome                       settle      // how it is settled
	err                           error       // why (the reason, for settleSetAside and settleArchive)
	settling                      bool        // its function returned: it holds a settling place, not a slot
	returned                      atomic.Bool // its function returned (read by Shutdown, heldTasks)
}

// handle runs dv from decoding to settling, then frees what it held: its
// slot (until its function returned) and its settling place.
func (w *Worker) handle(dv *delivery) {
	defer w.tasks.Done()
	dv.w, dv.outcome = w, settleRequeue
	defer dv.free()
	if !dv.decode() {
		return
	}
	w.held.add(dv)
	defer w.held.remove(dv)
	w.cancels.add(dv)
	defer w.cancels.remove(dv)
	if dv.ext == nil {
		dv.ext = w.lease.StartIn(&dv.lease, dv.d, dv.got)
	}
	dv.process()
	dv.freeSlots() // when taken and its function never ran
	dv.ext.Stop()
	if dv.outcome != settleRelease {
		dv.ext.Wait() // settle only once no extend can follow
	} else {
		// Shutdown: an extend stuck on a silent server must not hold the
		// release back; the two end by their own deadlines, side by side.
		defer dv.ext.Wait()
	}
	dv.settle()
}

// ran is called once the task's function has returned: the delivery
// gives its slot to the next fetch and holds a settling place instead
// (with Concurrency deliveries settling, it keeps its slot until one is
// done).
func (dv *delivery) ran() {
	if dv.settling {
		return // a middleware that ran the attempt twice
	}
	dv.settling = true
	dv.returned.Store(true)
	dv.freeSlots()
	dv.w.settles <- struct{}{}
	dv.freeSlot()
}

// freeSlot frees the delivery's slot.
func (dv *delivery) freeSlot() {
	<-dv.w.slots
	if dv.q != nil {
		dv.w.finished(dv.q)
	}
}

// free frees what the delivery holds once it is settled: its settling
// place, or its slot when its function never ran.
func (dv *delivery) free() {
	if dv.settling {
		<-dv.w.settles
	} else {
		dv.freeSlot()
	}
}

// decode checks, opens and decodes the delivery's body; a delivery that
// does not decode is set aside, and decode reports false.
func (dv *delivery) decode() bool {
	w, d := dv.w, dv.d
	discard := func(reason error) bool {
		if dv.ext != nil {
			dv.ext.Halt() // no extend may follow the settling
		}
		dv.unstart()
		w.setAside(d, reason)
		return false
	}
	if lim := w.cfg.MaxMessageSize; lim > 0 && len(d.Body) > lim {
		return discard(fmt.Errorf("%w: message %q on queue %q is %d bytes, over the worker's MaxMessageSize of %d bytes: set aside without decoding", ErrPayloadTooLarge, d.ID, d.Queue, len(d.Body), lim))
	}
	body, err := w.srv.cfg.Signing.open(d.Body)
	if err != nil {
		return discard(fmt.Errorf("%w (message %q on queue %q): not run, set aside", err, d.ID, d.Queue))
	}
	sig, err := DecodeSignature(body)
	if err != nil {
		return discard(fmt.Errorf("%w (message %q on queue %q)", err, d.ID, d.Queue))
	}
	// A signature that names no queue (sent by hand, or by another
	// producer) lives on the queue it came from: its retries and callbacks
	// go back there, never to queue "" where no worker reads.
	dv.queue = d.Queue
	if dv.queue == "" {
		dv.queue = w.queues.list[0].name
	}
	if err := selfCallback(sig); err != nil {
		// Running it would run the chord's callback before its group
		// completed (its state STARTED, then SUCCESS or FAILURE).
		return discard(fmt.Errorf("%w (message %q on queue %q): not run, set aside", err, d.ID, d.Queue))
	}
	routeTo(sig, dv.queue)
	dv.sig = sig
	return true
}

// process runs the decoded task through its states and leaves in
// dv.outcome how to settle the delivery (with settleSetAside or settleArchive,
// dv.err is the reason). Whether the attempt runs at all — a redelivery of
// a task already finished, owned by a later attempt or claimed by another
// message does not — is decided by begin, before the worker's middleware,
// on every backend: the middleware sees attempts only. Each step that
// calls the broker or backend runs under its own bounded ctx
// (Worker.call); the task itself runs under the task's ctx.
func (dv *delivery) process() {
	w, sig := dv.w, dv.sig
	if lost := dv.ext.LostCause(); lost != nil {
		// Its lease ran out while it waited in the worker's hand (a slow
		// or silent broker): another worker may hold it now.
		dv.outcome, dv.err = settleAbandon, fmt.Errorf("errand: task %s (%s): its lease was lost before it started; not run here, the broker delivers it again: %w", sig.Name, sig.UUID, lost)
		return
	}
	if !dv.begin() {
		return
	}
	tctx := dv.taskContext()
	defer dv.endTask()
	// The attempt itself, wrapped in the worker's middleware. A middleware
	// that never calls it leaves the delivery to be given back, the task
	// STARTED.
	if len(w.mw) == 0 {
		dv.attempt(tctx, sig)
	} else {
		wrapTask(w.mw, dv.attempt)(tctx, sig)
	}
	if !dv.settling { // the attempt never ran
		dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: task %s (%s): a worker middleware did not run it", sig.Name, sig.UUID)
	}
}

// begin decides whether the attempt runs, and if so records RECEIVED and
// STARTED: it reports false, with dv.outcome and dv.err saying how to
// settle, when it must not (a redelivery of a task already recorded as
// finished or owned by a later attempt: resume; no function here; bad
// arguments; over its rate limit or concurrency limit; a backend error). On a backend that
// begins attempts in one call (driver.Starter) a task that can run reads
// its previous state and records RECEIVED and STARTED in that one call
// (Worker.begin, start.go); every other task reads its state first.
func (dv *delivery) begin() bool {
	w, sig, d := dv.w, dv.sig, dv.d
	be := w.srv.backend
	// Find the function and decode the arguments before writing anything,
	// so a task that can run records RECEIVED and STARTED in one round
	// trip.
	dv.tk = w.srv.task(sig.Name)
	var cannotRun error
	if dv.tk != nil {
		dv.args, cannotRun = dv.tk.decodeArgs(sig.Args)
	}
	if dv.start != nil {
		return dv.beginColocated(cannotRun) // the fetch started it (colocation.go)
	}
	ctx, cancel := w.call()
	defer cancel()
	oneCall := dv.tk != nil && cannotRun == nil && be.Starter != nil
	dv.st = dv.state(0, &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: StateReceived, Attempt: sig.attempt(), CreatedAt: stateTime()})
	if !oneCall {
		prev, err := be.GetState(ctx, sig.UUID)
		switch {
		case errors.Is(err, ErrTaskNotFound):
			prev = nil
		case err != nil:
			dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: task %s (%s): read state: %w", sig.Name, sig.UUID, err)
			return false
		}
		if prev != nil {
			if done, outcome, err := w.resume(ctx, sig, prev, d); done {
				dv.outcome, dv.err = outcome, err
				return false
			}
			dv.st.CreatedAt = prev.CreatedAt
		}
	}

	if dv.tk == nil {
		if d.Attempt >= 1 && d.Attempt < w.cfg.UnknownTaskAttempts {
			// Perhaps another worker on this queue has it (another
			// application, a newer version): give it back untouched.
			dv.outcome, dv.err = settlePassOn, nil
			return false
		}
		cannotRun = fmt.Errorf("%w %q (task %s): no function is registered under that name on this worker (delivery %d; UnknownTaskAttempts %d)", ErrUnknownTask, sig.Name, sig.UUID, d.Attempt, w.cfg.UnknownTaskAttempts)
	}
	if cannotRun != nil {
		if err := be.SetState(ctx, dv.st); err != nil {
			dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: task %s (%s): set RECEIVED: %w", sig.Name, sig.UUID, err)
			if errors.Is(err, ErrCancelled) { // cancelled since it was read
				dv.outcome, dv.err = w.afterCancel(ctx, sig)
			}
			return false
		}
		dv.outcome, _, dv.err = w.fail(ctx, sig, dv.st, cannotRun)
		if dv.tk == nil && dv.outcome == settleArchive {
			// Set it aside even on a broker without an archive (its dead
			// letters), so it can be re-driven once a worker has the
			// function.
			dv.outcome, dv.err = settleSetAside, cannotRun
		}
		return false
	}
	// Over its rate limit, or its concurrency limit (the task's or its
	// queue's are full): back to the queue, nothing recorded.
	if outcome, err := w.takeToken(ctx, dv.tk, sig); outcome != settleAck {
		dv.outcome, dv.err = outcome, err
		return false
	}
	if outcome, err := dv.takeSlots(ctx); outcome != settleAck {
		dv.outcome, dv.err = outcome, err
		return false
	}

	cancel()
	ctx, cancel = w.call() // recording RECEIVED and STARTED is a step of its own
	defer cancel()
	dv.started = dv.state(1, dv.st)
	// Never before its task was created, whatever the producer's clock.
	dv.started.State, dv.started.StartedAt = StateStarted, notBefore(stateTime(), dv.st.CreatedAt)
	if oneCall {
		begun, outcome, err := w.begin(ctx, sig, d, dv.st, dv.started)
		if !begun {
			dv.outcome, dv.err = outcome, err
		}
		return begun
	}
	if err := be.SetAll(ctx, []*TaskState{dv.st, dv.started}); err != nil {
		dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: task %s (%s): set RECEIVED, STARTED: %w", sig.Name, sig.UUID, err)
		if errors.Is(err, ErrCancelled) { // cancelled since it was read
			dv.outcome, dv.err = w.afterCancel(ctx, sig)
		}
		return false
	}
	return true
}

// attempt is the TaskHandler the worker's middleware wraps: it calls the
// task's function and records how the attempt ended, leaving in
// dv.outcome how to settle the delivery.
func (dv *delivery) attempt(tctx context.Context, sig *Signature) (*TaskState, error) {
	w := dv.w
	w.beat.add(sig, sig.RoutingKey)
	results, runErr := safeCall(tctx, dv.tk, dv.args)
	if v := dv.prog.stop(); v != nil {
		// The final state carries the last progress; no progress write
		// follows it.
		dv.started.Progress = v
	}
	w.beat.remove(sig)
	dv.ran()
	if lost := dv.ext.LostCause(); lost != nil {
		// The broker may have handed the message to another worker, whose
		// attempt owns the task now: record nothing, settle nothing.
		dv.outcome, dv.err = settleAbandon, fmt.Errorf("errand: task %s (%s) returned after its lease was lost; its outcome is not recorded and the broker delivers it again: %w", sig.Name, sig.UUID, lost)
		return nil, runErr
	}
	if w.callCtx.Err() != nil {
		dv.outcome, dv.err = settleAbandon, fmt.Errorf("errand: task %s (%s) returned after the worker's settle grace; its outcome is not recorded and the broker delivers it again once its lease runs out", sig.Name, sig.UUID)
		return nil, runErr
	}
	if dv.cancel.err() != nil {
		// Cancelled while it ran (or before its result was recorded):
		// its outcome is discarded, whatever it is. A cancel learnt from a
		// notice is recorded again, where the portable path let this
		// attempt's start replace it (a cancel between its state's read
		// and its STARTED); one learnt from the backend is there already.
		ctx, cancel := w.call()
		defer cancel()
		if dv.cancel.noticed() {
			if err := w.srv.recordCancel(ctx, sig); err != nil {
				dv.outcome, dv.err = settleRequeue, err
				return nil, runErr
			}
		}
		dv.outcome, dv.err = w.afterCancel(ctx, sig)
		return nil, runErr
	}
	if runErr != nil && w.hardCtx.Err() != nil {
		// Shutdown gave up waiting and cancelled the task: give it back
		// unrecorded so another worker runs it.
		dv.outcome, dv.err = settleRelease, nil
		return nil, runErr
	}
	final := dv.started
	if runErr == nil {
		final = dv.state(2, dv.started)
		final.State, final.Results, final.FinishedAt = StateSuccess, results, notBefore(stateTime(), dv.started.StartedAt)
		if w.srv.coloc != nil && quiet(sig) {
			// One round trip out: SUCCESS goes with the ack (settle),
			// nothing called here.
			dv.stateInAck, dv.outcome, dv.err = final, settleAck, nil
			return final, nil
		}
	}
	ctx, cancel := w.call()
	defer cancel()
	// The steps after the run (the retry's and callbacks' sends among
	// them) see the attempt's values, e.g. its trace span, under their own
	// bounded lifetime.
	// A transaction a middleware put in the task's ctx is not theirs: a
	// worker never writes inside a caller's transaction (tx.go).
	ctx = noTx(withValuesOf(ctx, tctx))
	if runErr == nil {
		if err := w.srv.backend.SetState(ctx, final); err != nil {
			dv.outcome, dv.err = settleRequeue, fmt.Errorf("errand: task %s (%s): set SUCCESS: %w", sig.Name, sig.UUID, err)
			if errors.Is(err, ErrCancelled) { // cancelled as it returned: discarded
				dv.outcome, dv.err = w.afterCancel(ctx, sig)
			}
			return nil, runErr
		}
		if lost := dv.ext.LostCause(); lost != nil {
			// Lost while SUCCESS was written: the callbacks are the
			// redelivery's to send (it finds SUCCESS and settles the task).
			dv.outcome, dv.err = settleAbandon, fmt.Errorf("errand: task %s (%s): its lease was lost while its SUCCESS was recorded; its callbacks are left to the redelivery: %w", sig.Name, sig.UUID, lost)
			return final, runErr
		}
		dv.outcome, dv.err = w.afterSuccess(ctx, sig, results)
	} else {
		policy := dv.tk.policy
		if policy == nil {
			policy = w.cfg.RetryPolicy
		}
		dv.outcome, final, dv.err = w.scheduleRetry(ctx, sig, runErr, policy, dv.started)
	}
	if dv.outcome != settleAck && dv.outcome != settleArchive {
		return nil, runErr
	}
	return final, runErr
}

// settle settles the delivery as dv.outcome says.
func (dv *delivery) settle() {
	w, d, sig := dv.w, dv.d, dv.sig
	b := w.srv.broker
	ctx, cancel := w.call()
	defer cancel()
	attrs := dv.attrs // only when something is reported
	if lost := dv.ext.LostCause(); lost != nil && dv.outcome != settleAck && dv.outcome != settleAbandon {
		// Nothing to give back: the broker refuses a settle of a lost
		// lease, and delivers the message again on its own.
		dv.outcome, dv.err = settleAbandon, fmt.Errorf("errand: task %s (%s): not given back, its lease being lost: %w", sig.Name, sig.UUID, lost)
	}
	switch dv.outcome {
	case settleAbandon:
		w.report(dv.err, "errand: delivery left to its lease", attrs()...)
	case settleAck:
		if dv.stateInAck != nil {
			dv.settleColocated(ctx)
			break
		}
		if err := b.AckOne(ctx, d); err != nil {
			w.report(err, "errand: ack", attrs()...)
		}
	case settleRequeue:
		w.report(dv.err, "errand: task requeued after an error", attrs()...)
		if err := b.Release(ctx, d, time.Now().Add(w.cfg.ErrorBackoff)); err != nil {
			w.report(err, "errand: release", attrs()...)
		}
	case settleRelease:
		if err := b.Release(ctx, d, time.Time{}); err != nil {
			w.report(err, "errand: release on shutdown", attrs()...)
		}
	case settleSetAside:
		w.reject(ctx, d, sig, dv.err)
	case settleArchive:
		if w.archiver == nil {
			if err := b.AckOne(ctx, d); err != nil {
				w.report(err, "errand: ack", attrs()...)
			}
			break
		}
		w.archiveFailed(ctx, d, sig, dv.err)
	case settlePassOn:
		wait := w.backoff(d.Attempt)
		w.log.Info("errand: no function for this task here: given back for another worker", append(attrs(),
			"delivery", d.Attempt, "of", w.cfg.UnknownTaskAttempts, "retry_in", wait)...)
		if err := b.Release(ctx, d, time.Now().Add(wait)); err != nil {
			w.report(err, "errand: release unknown task", attrs()...)
		}
	case settleThrottle:
		w.releaseThrottled(ctx, d, sig, dv.err)
	}
}

// state returns a copy of st (as st.Copy) in the delivery's own i-th
// state: the states of an attempt are allocated with its delivery.
func (dv *delivery) state(i int, st *TaskState) *TaskState {
	c := &dv.states[i]
	*c = *st
	if st.Results != nil {
		c.Results = st.Copy().Results
	}
	return c
}

// attrs are the attributes of a log line about the delivery's task
// (taskAttrs), made only when something is reported.
func (dv *delivery) attrs() []any { return taskAttrs(dv.sig, dv.queue) }

// resume decides what a delivery does when its task already has the state
// prev: done is false when the attempt may run (prev is a state it may
// follow), else outcome and err say how to settle d. driver.Starter's
// table gives the same answer: a Starter writes exactly when done is
// false.
func (w *Worker) resume(ctx context.Context, sig *Signature, prev *TaskState, d *driver.Delivery) (done bool, outcome settle, err error) {
	if err := uuidConflict(sig, prev, d); err != nil {
		return true, settleSetAside, err
	}
	// A redelivery of work already recorded: finish what the crashed
	// or stale attempt left (callbacks are idempotent by UUID), never
	// run the function again.
	switch {
	case prev.State == StateCancelled:
		// Cancelled before it ran, or while a crashed attempt ran: it
		// never runs; what follows a cancel is done (again), and the
		// message acked.
		outcome, err = w.afterCancel(ctx, sig)
		return true, outcome, err
	case prev.State == StateSuccess:
		outcome, err = w.afterSuccess(ctx, sig, prev.Results)
		return true, outcome, err
	case prev.State == StateFailure:
		// Failed for good before: finish its callbacks and archive it
		// (a crash came between its FAILURE and its archiving).
		outcome, err := w.afterFailure(ctx, sig, prev.Error)
		if outcome == settleAck {
			return true, settleArchive, recordedFailure(prev)
		}
		return true, outcome, err
	case prev.State == StateRetry && prev.Attempt > sig.attempt():
		var cause error = errors.New(prev.Error)
		if prev.ErrorKind == string(KindSnoozed) {
			cause = &SnoozeError{} // a snooze, sent again at once: still no retry spent
		}
		outcome, _, err := w.scheduleRetry(ctx, sig, cause, nil, prev)
		return true, outcome, err
	case prev.Attempt > sig.attempt():
		return true, settleAck, nil // a later attempt owns the task
	}
	return false, settleAck, nil
}

// uuidConflict returns why d must not run as the task its UUID names
// (wrapping ErrUUIDConflict), or nil. prev is the task's recorded state.
//
//   - A different task name under the UUID: the message is not that task
//     (a forged or buggy producer reusing an ID); running it would
//     overwrite the real task's state and result.
//   - The task is STARTED, and d is the broker's first delivery of its
//     message (Attempt 1) for the same or a later attempt: a second
//     message with this UUID, while the first one runs under a live lease
//     (a redelivery of the running message has Attempt >= 2, and a retry
//     finds RETRY recorded). A second copy of a legitimate message (a
//     callback sent again by a redelivered parent) is set aside as well:
//     the running one completes the task.
//
// A broker that does not count deliveries (Attempt 0) gets only the name
// check.
func uuidConflict(sig *Signature, prev *TaskState, d *driver.Delivery) error {
	switch {
	case prev.TaskName != "" && prev.TaskName != sig.Name:
		return fmt.Errorf("%w: message %q on queue %q is task %q under UUID %s, which belongs to task %q (%s): not run, set aside",
			ErrUUIDConflict, d.ID, d.Queue, sig.Name, sig.UUID, prev.TaskName, prev.State)
	case prev.State == StateStarted && d.Attempt == 1 && sig.attempt() >= prev.Attempt:
		return fmt.Errorf("%w: message %q on queue %q carries UUID %s of task %q, STARTED (attempt %d) under another delivery's lease; this is the broker's first delivery of a second message, not a redelivery: not run, set aside",
			ErrUUIDConflict, d.ID, d.Queue, sig.UUID, sig.Name, prev.Attempt)
	}
	return nil
}

// taskContext returns the ctx of the delivery's attempt: cancelled when
// Shutdown gives up on the running tasks, when the lease of its delivery
// (dv.ext) is lost (with a cause wrapping ErrLeaseLost), when its task is
// cancelled (with a cause wrapping ErrCancelled: cancelwatch.go), after
// its timeout and at its deadline. endTask cancels it.
func (dv *delivery) taskContext() context.Context {
	w, sig := dv.w, dv.sig
	ctx, cancelLost := context.WithCancelCause(w.hardCtx)
	dv.cancelTask = cancelLost
	if dv.ext != nil {
		dv.ext.Follow(cancelLost)
		dv.ext.OnRenew(dv) // each renewal checks for a cancel (cancelwatch.go)
	}
	dv.cancel.follow(cancelLost)
	dv.startProgress()
	ctx = &taskInfoCtx{Context: ctx, prog: &dv.prog, info: TaskInfo{
		UUID: sig.UUID, Name: sig.Name, Attempt: sig.attempt(), RetryCount: w.retryLimit(sig), Snoozes: w.snoozeLimit(sig),
		GroupUUID: sig.GroupUUID, Headers: sig.Headers,
	}}
	timeout := sig.Timeout
	if timeout <= 0 {
		timeout = w.cfg.TaskTimeout
	}
	if timeout > 0 {
		ctx, dv.cancelTimeout = context.WithTimeout(ctx, timeout)
	}
	if sig.Deadline != nil {
		ctx, dv.cancelDeadline = context.WithDeadline(ctx, *sig.Deadline)
	}
	return ctx
}

// endTask cancels the ctx taskContext made, innermost first.
func (dv *delivery) endTask() {
	if dv.cancelDeadline != nil {
		dv.cancelDeadline()
	}
	if dv.cancelTimeout != nil {
		dv.cancelTimeout()
	}
	if dv.ext != nil {
		dv.ext.Unfollow()
		dv.ext.OnRenew(nil)
	}
	dv.cancel.unfollow()
	dv.prog.stop() // a middleware that set progress and never ran the attempt
	dv.cancelTask(nil)
}

// safeCall runs the task, turning a panic into a *PanicError with the stack.
func safeCall(ctx context.Context, tk *task, args []reflect.Value) (results []Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: string(debug.Stack())}
		}
	}()
	return tk.call(ctx, args)
}

// scheduleRetry retries sig after runErr if the error and the attempt count
// allow it, else fails it for good, and returns the state it recorded.
// With a nil policy (resuming a RETRY recorded by a crashed worker) the
// delay is zero.
func (w *Worker) scheduleRetry(ctx context.Context, sig *Signature, runErr error, policy RetryPolicy, st *TaskState) (settle, *TaskState, error) {
	var perm *PermanentError
	var argErr *ArgumentError
	if errors.As(runErr, &perm) || errors.As(runErr, &argErr) {
		return w.fail(ctx, sig, st, runErr)
	}
	if snz := (*SnoozeError)(nil); errors.As(runErr, &snz) {
		return w.snooze(ctx, sig, snz, st) // not a retry: snooze.go
	}
	if sig.attempt() > w.retryLimit(sig) {
		return w.fail(ctx, sig, st, &exhaustedError{runErr})
	}
	next := sig.Copy()
	next.Attempt = sig.attempt() + 1
	next.RetryTimeout = fibonacciNext(sig.RetryTimeout)
	var delay time.Duration
	var later *RetryLaterError
	switch {
	case errors.As(runErr, &later):
		delay = later.Delay
	case policy != nil:
		delay = policy.RetryDelay(next, runErr)
	}
	eta := time.Now().Add(max(delay, 0))
	if sig.Deadline != nil && eta.After(*sig.Deadline) {
		return w.fail(ctx, sig, st, fmt.Errorf("%w (no retry: deadline %s passed)", runErr, sig.Deadline.Format(time.RFC3339Nano)))
	}
	next.ETA = &eta
	return w.sendAgain(ctx, sig, next, st, "RETRY", "retry", func(r *TaskState) { r.Error = runErr.Error() })
}

// sendAgain records RETRY for next's attempt of sig (with mark's fields)
// unless st already is RETRY, then publishes next, and returns the state
// it recorded; a task cancelled meanwhile (the write answers ErrCancelled)
// never runs again (afterCancel). state and what name the write and the
// publish in errors.
func (w *Worker) sendAgain(ctx context.Context, sig, next *Signature, st *TaskState, state, what string, mark func(*TaskState)) (settle, *TaskState, error) {
	if st.State != StateRetry {
		st = st.Copy()
		st.State, st.Attempt = StateRetry, next.Attempt
		mark(st)
		if err := w.srv.backend.SetState(ctx, st); err != nil {
			if errors.Is(err, ErrCancelled) {
				outcome, err := w.afterCancel(ctx, sig)
				return outcome, st, err
			}
			return settleRequeue, st, fmt.Errorf("errand: task %s (%s): set %s: %w", sig.Name, sig.UUID, state, err)
		}
	}
	if err := w.srv.publish(ctx, next); err != nil {
		return settleRequeue, st, fmt.Errorf("errand: task %s (%s): publish %s: %w", sig.Name, sig.UUID, what, err)
	}
	return settleAck, st, nil
}

// retryLimit is the number of retries sig may have on this worker: its
// RetryCount, capped at WorkerConfig.MaxRetries, so a message asking for a
// billion retries gets the worker's bound (and the attempt number never
// comes near overflowing), raised by one for each snooze (snoozeLimit):
// a snooze is an attempt that spends no retry.
func (w *Worker) retryLimit(sig *Signature) int {
	r := min(sig.RetryCount, w.cfg.MaxRetries, math.MaxInt-1)
	return r + min(w.snoozeLimit(sig), math.MaxInt-1-max(r, 0))
}

// snoozeLimit is how many of sig's snoozes raise its retry bound: its
// Snoozes, never below 0 nor above the worker's MaxSnoozes (a message is
// input: a Snoozes of a billion must not buy a billion retries).
func (w *Worker) snoozeLimit(sig *Signature) int {
	return min(max(sig.Snoozes, 0), w.cfg.MaxSnoozes)
}

// snooze sends sig again after snz.Delay with Attempt and Snoozes one
// higher, recording RETRY (ErrorKind "snoozed") first unless st already
// is (a redelivery resuming a snooze its worker recorded and did not
// send); over the worker's MaxSnoozes, or past the signature's Deadline,
// it fails the task instead. It returns the state it recorded, as
// scheduleRetry does.
func (w *Worker) snooze(ctx context.Context, sig *Signature, snz *SnoozeError, st *TaskState) (settle, *TaskState, error) {
	if sig.Snoozes >= w.cfg.MaxSnoozes {
		return w.fail(ctx, sig, st, &snoozesExhaustedError{snoozes: max(sig.Snoozes, 0), limit: w.cfg.MaxSnoozes})
	}
	next := sig.Copy()
	next.Attempt, next.Snoozes = sig.attempt()+1, max(sig.Snoozes, 0)+1
	eta := time.Now().Add(max(snz.Delay, 0))
	if sig.Deadline != nil && eta.After(*sig.Deadline) {
		return w.fail(ctx, sig, st, fmt.Errorf("%w (no snooze: deadline %s passed)", snz, sig.Deadline.Format(time.RFC3339Nano)))
	}
	next.ETA = &eta
	return w.sendAgain(ctx, sig, next, st, "RETRY (snoozed)", "snoozed task", func(r *TaskState) {
		r.Error, r.ErrorKind = snz.Error(), string(KindSnoozed)
	})
}

// fail records FAILURE for sig, runs what follows a failure, and returns
// the state it recorded.
func (w *Worker) fail(ctx context.Context, sig *Signature, st *TaskState, cause error) (settle, *TaskState, error) {
	st = st.Copy()
	st.State, st.Error, st.FinishedAt = StateFailure, cause.Error(), notBefore(stateTime(), notBefore(st.StartedAt, st.CreatedAt))
	st.ErrorKind, st.ErrorDetail = classify(cause)
	if err := w.srv.backend.SetState(ctx, st); err != nil {
		if errors.Is(err, ErrCancelled) { // cancelled as it failed: no OnError
			outcome, err := w.afterCancel(ctx, sig)
			return outcome, st, err
		}
		return settleRequeue, st, fmt.Errorf("errand: task %s (%s): set FAILURE: %w", sig.Name, sig.UUID, err)
	}
	w.report(fmt.Errorf("errand: task %s (%s) failed: %w", sig.Name, sig.UUID, cause), "errand: task failed", taskAttrs(sig, sig.RoutingKey)...)
	outcome, err := w.afterFailure(ctx, sig, st.Error)
	if outcome == settleAck {
		return settleArchive, st, cause // failed for good: into the archive, where the broker keeps one
	}
	return outcome, st, err
}

// afterSuccess frees sig's unique key, completes sig's group (firing its
// chord) and sends its OnSuccess callbacks with its results appended.
// Every step is idempotent, so a redelivery repeats it safely.
func (w *Worker) afterSuccess(ctx context.Context, sig *Signature, results []Result) (settle, error) {
	if err := w.unlockUnique(ctx, sig); err != nil {
		return settleRequeue, err
	}
	if err := w.completeMember(ctx, sig); err != nil {
		return settleRequeue, err
	}
	cbs := make([]*Signature, 0, len(sig.OnSuccess))
	for _, cb := range sig.OnSuccess {
		cb = cb.Copy()
		if !cb.Immutable {
			cb.Args = append(cb.Args, resultArgs(results)...)
		}
		cbs = append(cbs, cb)
	}
	if err := w.sendCallbacks(ctx, cbs); err != nil {
		return settleRequeue, fmt.Errorf("errand: task %s (%s): send OnSuccess callbacks: %w", sig.Name, sig.UUID, err)
	}
	return settleAck, nil
}

// afterFailure frees sig's unique key, completes sig's group (a chord then
// fails) and sends its OnError callbacks with the error text as their
// first argument.
func (w *Worker) afterFailure(ctx context.Context, sig *Signature, errText string) (settle, error) {
	if err := w.unlockUnique(ctx, sig); err != nil {
		return settleRequeue, err
	}
	if err := w.completeMember(ctx, sig); err != nil {
		return settleRequeue, err
	}
	if err := w.sendCallbacks(ctx, errorCallbacks(sig.OnError, errText)); err != nil {
		return settleRequeue, fmt.Errorf("errand: task %s (%s): send OnError callbacks: %w", sig.Name, sig.UUID, err)
	}
	return settleAck, nil
}

// afterCancel is what follows a cancel of sig, which never ran or whose
// outcome was discarded: it frees sig's unique key, completes sig's group
// (a cancelled member counts toward its chord), and cancels its OnSuccess
// callbacks (a chain's later tasks: a cancelled chain stops), recording
// each CANCELLED without publishing it; its OnError callbacks never run
// (a cancel is not a failure). Every step is idempotent, so a redelivery
// repeats it safely; then the delivery is acked.
func (w *Worker) afterCancel(ctx context.Context, sig *Signature) (settle, error) {
	if err := w.unlockUnique(ctx, sig); err != nil {
		return settleRequeue, err
	}
	if err := w.completeMember(ctx, sig); err != nil {
		return settleRequeue, err
	}
	if err := w.cancelUnsent(ctx, sig.OnSuccess); err != nil {
		return settleRequeue, fmt.Errorf("errand: task %s (%s): cancel its OnSuccess callbacks: %w", sig.Name, sig.UUID, err)
	}
	return settleAck, nil
}

// cancelUnsent records CANCELLED for sigs, callbacks never published
// (nothing runs them), and for their OnSuccess callbacks in turn, through
// the backend's cancel: where a callback has a state not terminal
// (PENDING: a chain's later task, a chord's callback). A callback without
// a state was never sent, and is left without one.
func (w *Worker) cancelUnsent(ctx context.Context, sigs []*Signature) error {
	var sts []*TaskState
	now := stateTime()
	var walk func([]*Signature)
	walk = func(sigs []*Signature) {
		for _, sig := range sigs {
			sts = append(sts, &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: StateCancelled, Attempt: sig.attempt(),
				Error: cancelError, ErrorKind: string(KindCancelled), CreatedAt: now, FinishedAt: now})
			walk(sig.OnSuccess)
		}
	}
	walk(sigs)
	if len(sts) == 0 {
		return nil
	}
	for i, r := range w.srv.backend.Cancel(ctx, sts) {
		if r.Err != nil {
			return fmt.Errorf("task %s: %w", sts[i].TaskUUID, r.Err)
		}
	}
	return nil
}

// sendCallbacks publishes callbacks, first recording PENDING for each that
// has no state yet (chain members and chord callbacks were made PENDING when
// sent; a redelivered parent must not set a running callback back).
func (w *Worker) sendCallbacks(ctx context.Context, cbs []*Signature) error {
	for _, cb := range cbs {
		_, err := w.srv.backend.GetState(ctx, cb.UUID)
		switch {
		case errors.Is(err, ErrTaskNotFound):
			if err := w.srv.setPending(ctx, cb); err != nil {
				return err
			}
		case err != nil:
			return err
		}
	}
	return w.srv.publish(ctx, cbs...)
}

func errorCallbacks(sigs []*Signature, errText string) []*Signature {
	out := make([]*Signature, 0, len(sigs))
	for _, cb := range sigs {
		cb = cb.Copy()
		cb.Args = append([]Arg{{Type: "string", Value: errText}}, cb.Args...)
		out = append(out, cb)
	}
	return out
}

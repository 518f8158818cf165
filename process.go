package errand

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/errand-go/errand/driver"
)

// The task state machine: what a worker does with one decoded delivery,
// from reading its previous state to the callbacks that follow its end.

// process runs one decoded task through its states and returns how to
// settle its delivery d. Each step that calls the broker or backend runs
// under its own bounded ctx (Worker.call); the task itself runs under the
// task's ctx. With setAside, the error is the reason. ran is called once the
// task's function has returned, before its outcome is recorded: the
// delivery's slot is freed for the next fetch while it settles.
func (w *Worker) process(sig *Signature, d *driver.Delivery, ran func()) (settle, error) {
	be := w.srv.backend
	ctx, cancel := w.call()
	defer cancel()
	// Find the function and decode the arguments before writing anything,
	// so a task that can run records RECEIVED and STARTED in one round
	// trip. On a backend that begins attempts in one call (driver.Starter)
	// such a task reads its previous state in that same call (begin, in
	// start.go); every other task reads it first.
	tk := w.srv.task(sig.Name)
	var args []reflect.Value
	var cannotRun error
	if tk != nil {
		args, cannotRun = tk.decodeArgs(sig.Args)
	}
	oneCall := tk != nil && cannotRun == nil && be.starter != nil
	st := &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: StateReceived, Attempt: sig.attempt(), CreatedAt: time.Now().UTC()}
	if !oneCall {
		prev, err := be.GetState(ctx, sig.UUID)
		switch {
		case errors.Is(err, ErrTaskNotFound):
			prev = nil
		case err != nil:
			return requeue, fmt.Errorf("errand: task %s (%s): read state: %w", sig.Name, sig.UUID, err)
		}
		if prev != nil {
			if done, outcome, err := w.resume(ctx, sig, prev, d); done {
				return outcome, err
			}
			st.CreatedAt = prev.CreatedAt
		}
	}

	if tk == nil {
		if d.Attempt >= 1 && d.Attempt < w.cfg.UnknownTaskAttempts {
			// Perhaps another worker on this queue has it (another
			// application, a newer version): give it back untouched.
			return passOn, nil
		}
		cannotRun = fmt.Errorf("%w %q (task %s): no function is registered under that name on this worker (delivery %d; UnknownTaskAttempts %d)", ErrUnknownTask, sig.Name, sig.UUID, d.Attempt, w.cfg.UnknownTaskAttempts)
	}
	if cannotRun != nil {
		if err := be.setState(ctx, st); err != nil {
			return requeue, fmt.Errorf("errand: task %s (%s): set RECEIVED: %w", sig.Name, sig.UUID, err)
		}
		outcome, _, err := w.fail(ctx, sig, st, cannotRun)
		if tk == nil && outcome == archive {
			// Set it aside even on a broker without an archive (its dead
			// letters), so it can be re-driven once a worker has the
			// function.
			return setAside, cannotRun
		}
		return outcome, err
	}
	// Over its rate limit: back to the queue, nothing recorded.
	if outcome, err := w.takeToken(ctx, tk, sig); outcome != ack {
		return outcome, err
	}

	tctx, cancelTask := w.taskContext(sig)
	defer cancelTask()
	cancel() // the steps below each take their own bounded ctx

	// The attempt itself, wrapped in the worker's middleware (the hooks
	// included). A middleware that never calls it leaves the delivery to
	// be given back.
	outcome, outErr := requeue, fmt.Errorf("errand: task %s (%s): a worker middleware did not run it", sig.Name, sig.UUID)
	attempt := func(tctx context.Context, sig *Signature) (*TaskState, error) {
		ctx, cancel := w.call()
		started := st.Copy()
		started.State, started.StartedAt = StateStarted, time.Now().UTC()
		if oneCall {
			var begun bool
			begun, outcome, outErr = w.begin(ctx, sig, d, st, started)
			cancel()
			if !begun {
				return nil, notRun(sig, outErr)
			}
		} else {
			err := be.setStates(ctx, []*TaskState{st, started})
			cancel()
			if err != nil {
				outcome, outErr = requeue, fmt.Errorf("errand: task %s (%s): set RECEIVED, STARTED: %w", sig.Name, sig.UUID, err)
				return nil, outErr
			}
		}
		w.running.add(sig, sig.RoutingKey)
		results, runErr := safeCall(tctx, tk, args)
		w.running.remove(sig)
		ran()
		if runErr != nil && w.hardCtx.Err() != nil {
			// Shutdown gave up waiting and cancelled the task: give it
			// back unrecorded so another worker runs it.
			outcome, outErr = release, nil
			return nil, runErr
		}
		ctx, cancel = w.call()
		defer cancel()
		// The steps after the run (the retry's and callbacks' sends among
		// them) see the attempt's values, e.g. its trace span, under
		// their own bounded lifetime.
		ctx = withValuesOf(ctx, tctx)
		final := started
		if runErr == nil {
			final = started.Copy()
			final.State, final.Results, final.FinishedAt = StateSuccess, results, time.Now().UTC()
			if err := be.setState(ctx, final); err != nil {
				outcome, outErr = requeue, fmt.Errorf("errand: task %s (%s): set SUCCESS: %w", sig.Name, sig.UUID, err)
				return nil, runErr
			}
			outcome, outErr = w.afterSuccess(ctx, sig, results)
		} else {
			policy := tk.policy
			if policy == nil {
				policy = w.cfg.RetryPolicy
			}
			outcome, final, outErr = w.scheduleRetry(ctx, sig, runErr, policy, started)
		}
		if outcome != ack && outcome != archive {
			return nil, runErr
		}
		return final, runErr
	}
	wrapTask(w.mw, attempt)(tctx, sig)
	return outcome, outErr
}

// resume decides what a delivery does when its task already has the state
// prev: done is false when the attempt may run (prev is a state it may
// follow), else outcome and err say how to settle d. driver.Starter's
// table gives the same answer: a Starter writes exactly when done is
// false.
func (w *Worker) resume(ctx context.Context, sig *Signature, prev *TaskState, d *driver.Delivery) (done bool, outcome settle, err error) {
	if err := uuidConflict(sig, prev, d); err != nil {
		return true, setAside, err
	}
	// A redelivery of work already recorded: finish what the crashed
	// or stale attempt left (callbacks are idempotent by UUID), never
	// run the function again.
	switch {
	case prev.State == StateSuccess:
		outcome, err = w.afterSuccess(ctx, sig, prev.Results)
		return true, outcome, err
	case prev.State == StateFailure:
		// Failed for good before: finish its callbacks and archive it
		// (a crash came between its FAILURE and its archiving).
		outcome, err := w.afterFailure(ctx, sig, prev.Error)
		if outcome == ack {
			return true, archive, recordedFailure(prev)
		}
		return true, outcome, err
	case prev.State == StateRetry && prev.Attempt > sig.attempt():
		outcome, _, err := w.scheduleRetry(ctx, sig, errors.New(prev.Error), nil, prev)
		return true, outcome, err
	case prev.Attempt > sig.attempt():
		return true, ack, nil // a later attempt owns the task
	}
	return false, ack, nil
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

func (w *Worker) taskContext(sig *Signature) (context.Context, context.CancelFunc) {
	ctx := withTaskInfo(w.hardCtx, sig)
	timeout := sig.Timeout
	if timeout <= 0 {
		timeout = w.cfg.TaskTimeout
	}
	cancels := []context.CancelFunc{}
	if timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, timeout)
		cancels = append(cancels, c)
	}
	if sig.Deadline != nil {
		var c context.CancelFunc
		ctx, c = context.WithDeadline(ctx, *sig.Deadline)
		cancels = append(cancels, c)
	}
	return ctx, func() {
		for _, c := range cancels {
			c()
		}
	}
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
	if st.State != StateRetry {
		st = st.Copy()
		st.State, st.Error, st.Attempt = StateRetry, runErr.Error(), next.Attempt
		if err := w.srv.backend.setState(ctx, st); err != nil {
			return requeue, st, fmt.Errorf("errand: task %s (%s): set RETRY: %w", sig.Name, sig.UUID, err)
		}
	}
	if err := w.srv.publish(ctx, next); err != nil {
		return requeue, st, fmt.Errorf("errand: task %s (%s): publish retry: %w", sig.Name, sig.UUID, err)
	}
	return ack, st, nil
}

// retryLimit is the number of retries sig may have on this worker: its
// RetryCount, capped at WorkerConfig.MaxRetries, so a message asking for a
// billion retries gets the worker's bound (and the attempt number never
// comes near overflowing).
func (w *Worker) retryLimit(sig *Signature) int {
	return min(sig.RetryCount, w.cfg.MaxRetries, math.MaxInt-1)
}

// fail records FAILURE for sig, runs what follows a failure, and returns
// the state it recorded.
func (w *Worker) fail(ctx context.Context, sig *Signature, st *TaskState, cause error) (settle, *TaskState, error) {
	st = st.Copy()
	st.State, st.Error, st.FinishedAt = StateFailure, cause.Error(), time.Now().UTC()
	st.ErrorKind, st.ErrorDetail = classify(cause)
	if err := w.srv.backend.setState(ctx, st); err != nil {
		return requeue, st, fmt.Errorf("errand: task %s (%s): set FAILURE: %w", sig.Name, sig.UUID, err)
	}
	w.report(fmt.Errorf("errand: task %s (%s) failed: %w", sig.Name, sig.UUID, cause), "errand: task failed", taskAttrs(sig, sig.RoutingKey)...)
	outcome, err := w.afterFailure(ctx, sig, st.Error)
	if outcome == ack {
		return archive, st, cause // failed for good: into the archive, where the broker keeps one
	}
	return outcome, st, err
}

// afterSuccess frees sig's unique key, completes sig's group (firing its
// chord) and sends its OnSuccess callbacks with its results appended.
// Every step is idempotent, so a redelivery repeats it safely.
func (w *Worker) afterSuccess(ctx context.Context, sig *Signature, results []Result) (settle, error) {
	if err := w.unlockUnique(ctx, sig); err != nil {
		return requeue, err
	}
	if err := w.completeMember(ctx, sig); err != nil {
		return requeue, err
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
		return requeue, fmt.Errorf("errand: task %s (%s): send OnSuccess callbacks: %w", sig.Name, sig.UUID, err)
	}
	return ack, nil
}

// afterFailure frees sig's unique key, completes sig's group (a chord then
// fails) and sends its OnError callbacks with the error text as their
// first argument.
func (w *Worker) afterFailure(ctx context.Context, sig *Signature, errText string) (settle, error) {
	if err := w.unlockUnique(ctx, sig); err != nil {
		return requeue, err
	}
	if err := w.completeMember(ctx, sig); err != nil {
		return requeue, err
	}
	if err := w.sendCallbacks(ctx, errorCallbacks(sig.OnError, errText)); err != nil {
		return requeue, fmt.Errorf("errand: task %s (%s): send OnError callbacks: %w", sig.Name, sig.UUID, err)
	}
	return ack, nil
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

package errand

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Snooze returns an error that makes the worker run the task again after
// d without spending a retry: return it (or an error wrapping it) from a
// task function that must wait for something outside (a rate-limited
// API, a file not there yet). Like a retry, the task is sent again with
// its Attempt one higher; unlike one, its Signature.Snoozes grows by one
// too, and the task's retry bound (RetryCount) with it, so the retries
// left are what they were. While it waits the task is RETRY, with
// ErrorKind "snoozed" and an Error naming the delay. A task may snooze at
// most WorkerConfig.MaxSnoozes times: the snooze after that fails it with
// an error satisfying errors.Is(err, ErrSnoozesExhausted). d <= 0 runs it
// again at once. A snooze past the signature's Deadline fails the task.
// River's JobSnooze is the model.
func Snooze(d time.Duration) error {
	return &SnoozeError{Delay: d}
}

// SnoozeError asks the worker to run the task again after Delay without
// counting the attempt against its retries (see [Snooze]). It is found
// with [errors.As], so handlers may wrap it.
type SnoozeError struct {
	Delay time.Duration
}

func (e *SnoozeError) Error() string {
	return fmt.Sprintf("snoozed: runs again after %s", max(e.Delay, 0))
}

// ErrSnoozesExhausted is satisfied by the failure of a task that snoozed
// once more when it had snoozed WorkerConfig.MaxSnoozes times already.
var ErrSnoozesExhausted = errors.New("errand: snoozes exhausted")

// snoozesExhaustedError is the failure of a task over its snooze bound.
type snoozesExhaustedError struct {
	snoozes, limit int
}

func (e *snoozesExhaustedError) Error() string {
	return fmt.Sprintf("%v: the task snoozed %d times, the worker's MaxSnoozes is %d; it snoozed again and fails instead of waiting for ever", ErrSnoozesExhausted, e.snoozes, e.limit)
}

func (e *snoozesExhaustedError) Unwrap() error { return ErrSnoozesExhausted }

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
	if st.State != StateRetry {
		st = st.Copy()
		st.State, st.Error, st.ErrorKind, st.Attempt = StateRetry, snz.Error(), string(KindSnoozed), next.Attempt
		if err := w.srv.backend.SetState(ctx, st); err != nil {
			if errors.Is(err, ErrCancelled) { // cancelled as it snoozed: it never runs again
				outcome, err := w.afterCancel(ctx, sig)
				return outcome, st, err
			}
			return settleRequeue, st, fmt.Errorf("errand: task %s (%s): set RETRY (snoozed): %w", sig.Name, sig.UUID, err)
		}
	}
	if err := w.srv.publish(ctx, next); err != nil {
		return settleRequeue, st, fmt.Errorf("errand: task %s (%s): publish snoozed task: %w", sig.Name, sig.UUID, err)
	}
	return settleAck, st, nil
}

package errand

import (
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

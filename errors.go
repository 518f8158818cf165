package errand

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// Sentinel errors, tested with [errors.Is]. The first four (and
// ErrLeaseLost) are the driver package's own values, so a driver's error
// satisfies them too. The driver package's errors that only drivers
// return (ErrNotMember, ErrGroupNotFound) are not repeated here: test for
// them with the driver package's values.
var (
	// ErrClosed is returned by every call on a broker, backend or server
	// after it has been closed.
	ErrClosed = driver.ErrClosed

	// ErrTaskNotFound is returned when a task ID is unknown to the backend,
	// or its result has expired.
	ErrTaskNotFound = driver.ErrTaskNotFound

	// ErrNotArchived is returned when an archived task is asked for (shown,
	// requeued) by an ID that is not in the queue's archive.
	ErrNotArchived = driver.ErrNotArchived

	// ErrPayloadTooLarge is returned, before anything is sent, when an
	// encoded message exceeds the broker's declared maximum payload.
	ErrPayloadTooLarge = driver.ErrPayloadTooLarge

	// ErrCancelled is the cause of a cancelled task's ctx
	// (context.Cause), and is satisfied by the error AsyncResult.Get
	// returns for a CANCELLED task.
	ErrCancelled = driver.ErrCancelled

	// ErrUnknownTask is wrapped by the failure recorded for a task whose
	// name no worker has registered.
	ErrUnknownTask = errors.New("errand: unknown task name")

	// ErrBadArguments is wrapped by the failure recorded for a task whose
	// arguments do not fit the registered function.
	ErrBadArguments = errors.New("errand: bad task arguments")

	// ErrBadMessage is wrapped by the reason a delivery is set aside when
	// its body cannot be decoded as a Signature.
	ErrBadMessage = errors.New("errand: malformed message")

	// ErrUUIDConflict is wrapped by the reason a delivery is set aside when
	// its task UUID belongs to another task: one recorded under another
	// name, or one STARTED under another delivery's live lease (see
	// docs/concepts.md, "Bad input").
	ErrUUIDConflict = errors.New("errand: task UUID already in use")

	// ErrRetriesExhausted is satisfied by the failure of a task whose
	// function returned an error that allowed a retry when it had none
	// left (RetryCount, capped by WorkerConfig.MaxRetries). The failure's
	// text is the last error's.
	ErrRetriesExhausted = errors.New("errand: retries exhausted")

	// ErrBadSignature is wrapped by the reason a delivery is set aside when
	// its message signature is missing (under Signing.Require), names a key
	// the worker does not have, or does not verify (see [Signing]).
	ErrBadSignature = errors.New("errand: bad message signature")
)

// PayloadError reports an encoded message larger than a broker accepts.
// It satisfies errors.Is(err, ErrPayloadTooLarge).
type PayloadError struct {
	TaskName string
	Size     int // encoded size in bytes
	Limit    int // broker maximum in bytes
}

func (e *PayloadError) Error() string {
	return fmt.Sprintf("errand: task %q: encoded message is %d bytes, broker limit is %d bytes", e.TaskName, e.Size, e.Limit)
}

// Is reports whether target is ErrPayloadTooLarge.
func (e *PayloadError) Is(target error) bool { return target == ErrPayloadTooLarge }

func init() {
	// The portable layer reports a message over a broker's limit as a
	// *PayloadError.
	portable.TooLarge = func(name string, size, limit int) error {
		return &PayloadError{TaskName: name, Size: size, Limit: limit}
	}
}

// ArgumentError reports an argument that does not fit the registered
// function's parameter. It satisfies errors.Is(err, ErrBadArguments) and is
// never retried.
type ArgumentError struct {
	TaskName string
	Index    int    // zero-based argument index; -1 when the count is wrong
	Got      string // the type named by the message (Arg.Type), or the count
	Want     string // the parameter type of the registered function
	Err      error  // the underlying decoding error, if any
}

func (e *ArgumentError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("errand: task %q: got %s arguments, function takes %s", e.TaskName, e.Got, e.Want)
	}
	msg := fmt.Sprintf("errand: task %q: argument %d: cannot use %s value as %s", e.TaskName, e.Index, e.Got, e.Want)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrBadArguments.
func (e *ArgumentError) Is(target error) bool { return target == ErrBadArguments }

// Unwrap returns the decoding error.
func (e *ArgumentError) Unwrap() error { return e.Err }

// TaskError is what AsyncResult.Get returns for a task that ended in
// FAILURE: the task's identity, the error text its worker recorded, and
// the failure's kind; and for a task CANCELLED (Kind KindCancelled,
// errors.Is(err, ErrCancelled)).
//
// It unwraps to the failure as the worker saw it, rebuilt from the state:
// errors.Is(err, ErrUnknownTask), ErrBadArguments, ErrPayloadTooLarge,
// ErrRetriesExhausted, context.DeadlineExceeded (a task timeout) and
// errand's other sentinels hold when they held for the worker's error, and
// errors.As finds an *ArgumentError (task, index and types), a *PanicError
// (the panic value as text, and the stack) or a *PermanentError (its text).
// Other error types of the task's own are not rebuilt: only their text is
// kept. A failure recorded by a worker older than this has Kind "" and
// unwraps to nothing.
type TaskError struct {
	UUID    string
	Name    string
	Message string
	Kind    ErrorKind // KindUnknownTask, KindBadArguments, ...; "" when not recorded
	Err     error     // the recorded failure, rebuilt; nil when not recorded
}

func (e *TaskError) Error() string {
	if e.Kind == KindCancelled {
		return fmt.Sprintf("errand: task %s (%s) cancelled: %s", e.Name, e.UUID, e.Message)
	}
	return fmt.Sprintf("errand: task %s (%s) failed: %s", e.Name, e.UUID, e.Message)
}

// Unwrap returns the recorded failure.
func (e *TaskError) Unwrap() error { return e.Err }

// exhaustedError is a task's last error when no retry is left: the same
// text, and errors.Is(err, ErrRetriesExhausted).
type exhaustedError struct{ err error }

func (e *exhaustedError) Error() string        { return e.err.Error() }
func (e *exhaustedError) Unwrap() error        { return e.err }
func (e *exhaustedError) Is(target error) bool { return target == ErrRetriesExhausted }

// RetryLaterError asks the worker to run the task again after Delay. It is
// found with [errors.As], so handlers may wrap it. Retries it causes count
// against the task's RetryCount like any other retry; when none are left the
// task fails.
type RetryLaterError struct {
	Delay time.Duration
	Err   error // optional cause, recorded in the RETRY state
}

// RetryLater returns an error that makes the worker retry the task after d.
func RetryLater(d time.Duration, cause error) error {
	return &RetryLaterError{Delay: d, Err: cause}
}

func (e *RetryLaterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry later (after %s)", e.Delay)
	}
	return fmt.Sprintf("retry later (after %s): %v", e.Delay, e.Err)
}

func (e *RetryLaterError) Unwrap() error { return e.Err }

// PermanentError makes the worker fail the task at once, without retries.
// It is found with [errors.As].
type PermanentError struct{ Err error }

// Permanent wraps err so the task fails without retry.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("failed permanently")
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// PanicError is the failure recorded for a task whose function panicked.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack)
}

func (e *PanicError) valueText() string { return fmt.Sprint(e.Value) }

// ErrLeaseLost is the cause of a running task's ctx cancelled because the
// worker lost the lease of its delivery (test it with
// errors.Is(context.Cause(ctx), ErrLeaseLost)): the broker answered
// driver.ErrLeaseLost to a renewal, or the lease ran out, on the worker's
// clock, during an outage that kept every renewal from succeeding. The
// broker may have delivered the task to another worker by then, so the
// worker records nothing of the attempt (see docs/concepts.md, "Lost
// leases"). It is driver.ErrLeaseLost's value: a driver's lease error
// satisfies it too.
var ErrLeaseLost = driver.ErrLeaseLost

// ShutdownError is what Worker.Shutdown returns when its ctx ends before
// every task has returned and settled. It unwraps to the ctx's error, so
// errors.Is(err, context.DeadlineExceeded) holds for a Shutdown that ran
// out of time. The tasks it names had their ctx cancelled; each that
// returns within SettleGrace is still settled in the background (see
// WorkerConfig.SettleGrace).
type ShutdownError struct {
	Err error // ctx.Err() of the Shutdown call
	// Running are the tasks whose function had not returned when Shutdown
	// did, Settling those whose function had returned and whose outcome
	// was still being recorded, sent or acked; each oldest first, with the
	// time its delivery was taken up as StartedAt.
	Running, Settling []RunningTask
	SettleGrace       time.Duration // WorkerConfig.SettleGrace
}

func (e *ShutdownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "errand: worker shutdown: %v with %d tasks running", e.Err, len(e.Running))
	name := func(ts []RunningTask) {
		b.WriteString(" (")
		for i, t := range ts {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == 5 {
				fmt.Fprintf(&b, "and %d more", len(ts)-i)
				break
			}
			fmt.Fprintf(&b, "%s %s", t.Name, t.UUID)
		}
		b.WriteString(")")
	}
	if len(e.Running) > 0 {
		name(e.Running)
	}
	fmt.Fprintf(&b, " and %d settling", len(e.Settling))
	if len(e.Settling) > 0 {
		name(e.Settling)
	}
	fmt.Fprintf(&b, "; their ctx is cancelled, and each that returns within the settle grace (%v) is settled", e.SettleGrace)
	return b.String()
}

// Unwrap returns the ctx error.
func (e *ShutdownError) Unwrap() error { return e.Err }

// ErrDuplicate is satisfied by the error of a send refused because its
// signature's UniqueKey is held by another task (a *DuplicateError).
var ErrDuplicate = errors.New("errand: duplicate task")

// DuplicateError reports a send refused because another task holds its
// unique key. It satisfies errors.Is(err, ErrDuplicate).
type DuplicateError struct {
	Key string // the signature's UniqueKey
	ID  string // the UUID of the task holding it
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("errand: duplicate task: unique key %q is held by task %s", e.Key, e.ID)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

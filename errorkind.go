package errand

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/errand-go/errand/driver"
)

// ErrorKind says how a task failed. It is recorded with the task's FAILURE
// state (TaskState.ErrorKind, as a string) and returned to the producer as
// TaskError.Kind. The first kind that applies is recorded, in the order
// below; "" means none was recorded (a worker older than ErrorKind).
type ErrorKind string

// The failure kinds.
const (
	KindUnknownTask      ErrorKind = "unknown_task"      // no function registered under its name (ErrUnknownTask)
	KindBadArguments     ErrorKind = "bad_arguments"     // its arguments do not fit the function (*ArgumentError)
	KindPermanent        ErrorKind = "permanent"         // its function returned Permanent(err) (*PermanentError)
	KindPanic            ErrorKind = "panic"             // its function panicked (*PanicError)
	KindTimeout          ErrorKind = "timeout"           // it ended with context.DeadlineExceeded (Timeout, Deadline)
	KindRetriesExhausted ErrorKind = "retries_exhausted" // it failed with no retry left (ErrRetriesExhausted)
	KindSnoozesExhausted ErrorKind = "snoozes_exhausted" // it snoozed once more than WorkerConfig.MaxSnoozes (ErrSnoozesExhausted)
	KindFailed           ErrorKind = "failed"            // anything else (a chord member failed, a deadline left no time to retry)
	// KindCancelled is the kind of a CANCELLED state (Server.Cancel), not
	// of a failure: the task was cancelled before or while it ran.
	KindCancelled ErrorKind = "cancelled"
)

// KindSnoozed is the ErrorKind of the RETRY state of a task that snoozed
// (its function returned [Snooze]): it waits to run again, no retry
// spent. It is never a FAILURE's kind.
const KindSnoozed ErrorKind = "snoozed"

// recordedSentinels are the errors a recorded failure can be tested for
// with errors.Is on the producer's side, under the names the detail
// records them by.
var recordedSentinels = []struct {
	name string
	err  error
}{
	{"unknown_task", ErrUnknownTask},
	{"bad_arguments", ErrBadArguments},
	{"payload_too_large", ErrPayloadTooLarge},
	{"retries_exhausted", ErrRetriesExhausted},
	{"snoozes_exhausted", ErrSnoozesExhausted},
	{"timeout", context.DeadlineExceeded},
	{"canceled", context.Canceled},
	{"task_not_found", ErrTaskNotFound},
	{"group_not_found", driver.ErrGroupNotFound},
	{"not_member", driver.ErrNotMember},
	{"closed", ErrClosed},
	{"lease_lost", driver.ErrLeaseLost},
	{"bad_message", ErrBadMessage},
	{"uuid_conflict", ErrUUIDConflict},
	{"bad_signature", ErrBadSignature},
	{"cancelled", ErrCancelled},
}

// errorDetail is TaskState.ErrorDetail: what the producer needs to rebuild
// the failure's typed errors. Its JSON is errand's own, additive only.
type errorDetail struct {
	Is        []string     `json:"is,omitempty"`        // recordedSentinels the cause satisfied
	Arg       *argDetail   `json:"arg,omitempty"`       // the *ArgumentError, if any
	Panic     *panicDetail `json:"panic,omitempty"`     // the *PanicError, if any
	Permanent *string      `json:"permanent,omitempty"` // the *PermanentError's text, if any
}

type argDetail struct {
	Task  string `json:"task"`
	Index int    `json:"index"`
	Got   string `json:"got"`
	Want  string `json:"want"`
	Err   string `json:"err,omitempty"`
}

type panicDetail struct {
	Value string `json:"value"` // fmt's %v of the panic value
	Stack string `json:"stack"`
}

// classify returns the kind and detail recorded for a failure with cause.
func classify(cause error) (kind, detail string) {
	var d errorDetail
	for _, s := range recordedSentinels {
		if errors.Is(cause, s.err) {
			d.Is = append(d.Is, s.name)
		}
	}
	var argErr *ArgumentError
	var perm *PermanentError
	var pe *PanicError
	if errors.As(cause, &argErr) {
		d.Arg = &argDetail{Task: argErr.TaskName, Index: argErr.Index, Got: argErr.Got, Want: argErr.Want}
		if argErr.Err != nil {
			d.Arg.Err = argErr.Err.Error()
		}
	}
	if errors.As(cause, &pe) {
		d.Panic = &panicDetail{Value: pe.valueText(), Stack: pe.Stack}
	}
	if errors.As(cause, &perm) {
		text := perm.Error()
		d.Permanent = &text
	}
	var k ErrorKind
	switch {
	case errors.Is(cause, ErrUnknownTask):
		k = KindUnknownTask
	case d.Arg != nil:
		k = KindBadArguments
	case d.Permanent != nil:
		k = KindPermanent
	case d.Panic != nil:
		k = KindPanic
	case errors.Is(cause, context.DeadlineExceeded):
		k = KindTimeout
	case errors.Is(cause, ErrRetriesExhausted):
		k = KindRetriesExhausted
	case errors.Is(cause, ErrSnoozesExhausted):
		k = KindSnoozesExhausted
	default:
		k = KindFailed
	}
	b, err := json.Marshal(d)
	if err != nil || string(b) == "{}" {
		return string(k), ""
	}
	return string(k), string(b)
}

// recordedError is a failure read back from its state: its text, the
// sentinels it satisfied, and the typed errors rebuilt from its detail.
type recordedError struct {
	msg   string
	is    []error
	typed []error
}

func (e *recordedError) Error() string             { return e.msg }
func (e *recordedError) Is(target error) bool      { return slices.Contains(e.is, target) }
func (e *recordedError) Unwrap() []error           { return e.typed }
func (e *recordedError) withText(msg string) error { return &recordedError{msg: msg, is: e.is} }

// rebuild returns the failure recorded in st as an error that satisfies
// what the worker's cause did (see TaskError), or nil when st records no
// detail (an older worker).
func rebuild(st *TaskState) error {
	if st.ErrorKind == "" && st.ErrorDetail == "" && st.State != StateCancelled {
		return nil
	}
	var d errorDetail
	if st.ErrorDetail != "" {
		_ = json.Unmarshal([]byte(st.ErrorDetail), &d) // a detail this version cannot read still gives the kind
	}
	re := &recordedError{msg: st.Error}
	for _, name := range d.Is {
		for _, s := range recordedSentinels {
			if s.name == name {
				re.is = append(re.is, s.err)
			}
		}
	}
	if ErrorKind(st.ErrorKind) == KindUnknownTask && !slices.Contains(re.is, ErrUnknownTask) {
		re.is = append(re.is, ErrUnknownTask)
	}
	if (st.State == StateCancelled || ErrorKind(st.ErrorKind) == KindCancelled) && !slices.Contains(re.is, ErrCancelled) {
		re.is = append(re.is, ErrCancelled)
	}
	if a := d.Arg; a != nil {
		ae := &ArgumentError{TaskName: a.Task, Index: a.Index, Got: a.Got, Want: a.Want}
		if a.Err != "" {
			ae.Err = errors.New(a.Err)
		}
		re.typed = append(re.typed, ae)
	}
	if p := d.Panic; p != nil {
		re.typed = append(re.typed, &PanicError{Value: p.Value, Stack: p.Stack})
	}
	if d.Permanent != nil {
		re.typed = append(re.typed, &PermanentError{Err: re.withText(*d.Permanent)})
	}
	return re
}

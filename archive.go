package errand

import (
	"context"
	"errors"
)

// archiveReason says in a few words why a task ended in the archive.
func archiveReason(cause error) string {
	var argErr *ArgumentError
	var perm *PermanentError
	var panicked *PanicError
	switch {
	case errors.Is(cause, ErrBadSignature):
		return "bad signature"
	case errors.Is(cause, ErrUUIDConflict):
		return "uuid conflict"
	case errors.Is(cause, ErrPayloadTooLarge):
		return "too large"
	case errors.Is(cause, ErrBadMessage):
		return "undecodable"
	case errors.Is(cause, ErrUnknownTask):
		return "unknown task"
	case errors.As(cause, &argErr), errors.Is(cause, ErrBadArguments):
		return "bad arguments"
	case errors.As(cause, &perm):
		return "permanent error"
	case errors.Is(cause, ErrRetriesExhausted):
		return "retries exhausted"
	case errors.As(cause, &panicked):
		return "panicked"
	case errors.Is(cause, context.DeadlineExceeded):
		return "timed out"
	}
	return "failed"
}

// recordedFailure is the failure st records as an error: what rebuild
// gives, or, for a record without a kind (an older worker, a backend that
// keeps no kind), an error with its text.
func recordedFailure(st *TaskState) error {
	if err := rebuild(st); err != nil {
		return err
	}
	text := st.Error
	if text == "" {
		text = "failed (no error recorded)"
	}
	return errors.New(text)
}

package driver

import "errors"

// Sentinel errors. Drivers map their service's errors onto these so callers
// can test them with [errors.Is]; the root package errand exports the same
// values under the same names.
var (
	// ErrClosed is returned by every call on a broker, backend or server
	// after it has been closed.
	ErrClosed = errors.New("errand: closed")

	// ErrTaskNotFound is returned when a task ID is unknown to the backend,
	// or its result has expired.
	ErrTaskNotFound = errors.New("errand: task not found (unknown or expired)")

	// ErrGroupNotFound is returned when a group ID is unknown to the
	// backend, or its metadata has expired.
	ErrGroupNotFound = errors.New("errand: group not found (unknown or expired)")

	// ErrNotMember is returned by Backend.CompleteGroupMember for a task
	// UUID that is not one of the group's members (a stray message naming
	// the group); the group's count is unchanged.
	ErrNotMember = errors.New("errand: task is not a member of the group")

	// ErrLeaseLost is returned when a delivery is acked, released or
	// extended after its lease ran out (another consumer may hold it now).
	ErrLeaseLost = errors.New("errand: delivery lease lost")

	// ErrNotArchived is returned by Archiver.ArchivedEntry and
	// Archiver.Requeue for an ID that is not in the queue's archive.
	ErrNotArchived = errors.New("errand: task is not in the archive")

	// ErrPayloadTooLarge is returned, before anything is sent, when an
	// encoded message exceeds the broker's declared maximum payload.
	ErrPayloadTooLarge = errors.New("errand: payload too large")

	// ErrCancelled is the per-state error of a write refused because the
	// task is CANCELLED (see [Canceller]), and the cause of a cancelled
	// task's ctx.
	ErrCancelled = errors.New("errand: task cancelled")
)

package driver

import (
	"context"
	"time"
)

// Backend stores task states and results, and the workflow counters that
// groups and chords need. Every workflow primitive must be a single atomic
// operation on the server side (a Lua script, a filtered update, a
// compare-and-set), never a read-modify-write done in Go, because many
// workers complete members of one group at once.
//
// All methods may be called concurrently. errand checks ctx before every
// call and, within one Server, never calls a method after Close (it answers
// ErrClosed itself); a driver value shared by several Servers may still be
// called after Close and must then return an error, never panic or block.
type Backend interface {
	// SetState stores st as the task's current state, replacing the
	// previous one, and restarts its result expiry.
	SetState(ctx context.Context, st *TaskState) error

	// GetState returns the task's current state, or ErrTaskNotFound when the
	// ID is unknown or its result has expired.
	GetState(ctx context.Context, taskUUID string) (*TaskState, error)

	// InitGroup records a group's members, in group order, before any of
	// them is sent. Group metadata lives until the group is finished and its
	// chord (if any) fired, and at least as long as one result expiry after
	// its last member completed: never just one result expiry from the
	// group's creation.
	InitGroup(ctx context.Context, groupUUID string, taskUUIDs []string) error

	// CompleteGroupMember marks taskUUID done in its group and returns how
	// many members are done and the group size. It is idempotent per task
	// UUID (a redelivered member counts once) and O(1): it never reads every
	// member's state, nor the member list. It counts only the group's own
	// members: a UUID that is not a member returns an error satisfying
	// errors.Is(err, ErrNotMember) and changes nothing, checked in the same
	// atomic step as the count. An unknown or expired group returns
	// ErrGroupNotFound.
	CompleteGroupMember(ctx context.Context, groupUUID, taskUUID string) (done, total int, err error)

	// ClaimChord is a compare-and-set on the group's chord: the first claimer
	// wins (true) and every other claimer loses (false), under any
	// concurrency. The claimer that already won wins again, so a redelivered
	// claimer whose process crashed between claim and publish still sends
	// the callback.
	ClaimChord(ctx context.Context, groupUUID, claimer string) (bool, error)

	// GroupStates returns the states of the group's members in group order
	// (one read, when the chord fires). A member with no state yet is
	// returned as PENDING.
	GroupStates(ctx context.Context, groupUUID string) ([]*TaskState, error)

	// Close releases the backend's resources. A second Close is harmless.
	Close() error
}

// StateWaiter is implemented by backends that can wake a waiter when a
// task's state changes, instead of errand polling with backoff.
type StateWaiter interface {
	// WaitState blocks until the task's state satisfies done, ctx is done,
	// or the task is unknown (ErrTaskNotFound).
	WaitState(ctx context.Context, taskUUID string, done func(*TaskState) bool) (*TaskState, error)
}

// StateBatcher is implemented by backends that can write many states in
// one round trip (a pipeline). The server uses it for the PENDING states of a
// group or chord.
type StateBatcher interface {
	SetStates(ctx context.Context, sts []*TaskState) error
}

// Expirer is implemented by backends whose results expire. ResultExpiry is
// the configured time a result is kept after its last write.
type Expirer interface {
	ResultExpiry() time.Duration
}

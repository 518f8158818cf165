package driver

import (
	"context"
	"time"
)

// Uniquer is implemented by brokers that hold uniqueness locks on their
// server, for errand's unique tasks (Signature.UniqueKey): a producer takes
// the task's key before the task is recorded and published, and the worker
// gives it back when the task ends for good. Both calls are single atomic
// steps on the server (a Lua script, a conditional write), never a read
// followed by a write in Go: many producers send the same key at once.
//
// Both methods may be called concurrently, and return an error, never
// panic or block, after Close.
type Uniquer interface {
	// Lock takes key for id for ttl (ttl > 0), unless another id holds it.
	// It returns id when id holds the key now (taken, or already held by
	// id: its ttl then starts again), else the ID of the holder, and
	// changes nothing. A lock whose ttl has run out is free, whatever its
	// holder did: ttl bounds a lock whose worker died. Times are the
	// broker's server's where it has one.
	Lock(ctx context.Context, key, id string, ttl time.Duration) (holder string, err error)

	// Unlock frees key if id holds it, in one step (compare and delete).
	// When another id holds key, or nobody does, it changes nothing and
	// returns nil: a worker finishing a task whose lock expired and was
	// taken by a newer task must not free the newer task's lock.
	Unlock(ctx context.Context, key, id string) error
}

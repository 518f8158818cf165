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
	// SetStates stores each of sts as its task's current state, replacing
	// the previous one, and restarts its result expiry, under the batch
	// error convention (see the package doc's "Batch calls"). A batch may
	// hold the states of many tasks (errand joins the writes of concurrent
	// worker slots, and writes a group's PENDING states in chunks of its
	// Config.PublishBatch, 100 by default: a driver whose service takes
	// fewer per call splits the batch itself) and several states of one task (its
	// RECEIVED then STARTED, or a group's PENDING states), which are stored
	// in order, so the task's last state of the batch is its current one.
	// Each state is written on its own: the batch need not be atomic, and
	// one state the backend refuses (a result it cannot encode) fails that
	// state alone.
	SetStates(ctx context.Context, sts []*TaskState) []error

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

// Expirer is implemented by backends whose results expire. ResultExpiry is
// the configured time a result is kept after its last write.
type Expirer interface {
	ResultExpiry() time.Duration
}

// Starter is implemented by backends that can begin an attempt in one
// round trip: read the task's previous state and, if the attempt may run,
// write its RECEIVED and STARTED states, in one atomic step on the server
// (a script, a compare-and-set), never a read then a write from Go. The
// worker then needs no separate read for its redelivery check.
//
// Start handles a batch: errand may gather the requests of many worker
// slots into one call. Requests are independent, and a batch may hold two
// requests of one UUID (two messages of one task fetched together, such
// as a callback published again by a redelivered parent): they are
// decided in request order, the second seeing what the first wrote. Each
// request is atomic on its own: a batch need not be, so a backend may
// group a batch by server, shard or slot, or run one script per request
// in one pipeline. Start always returns one result per request, in
// request order; a request that failed has Err set, and nothing can be
// said about it (it may or may not have been written). A call that fails
// as a whole sets the same Err on every result (see the package doc's
// "Batch calls").
//
// Each request is decided from the task's previous state prev (nil when
// the task has none, or its result has expired) by this table, top row
// first; name and attempt are Started's TaskName and Attempt:
//
//	| prev                                                   | writes  | why                                   |
//	|--------------------------------------------------------|---------|---------------------------------------|
//	| nil                                                    | yes     | first attempt, no state yet           |
//	| TaskName not empty and not name                        | no      | the UUID is another task's            |
//	| SUCCESS, FAILURE or CANCELLED                          | no      | finished: the worker only settles it  |
//	| Attempt > attempt                                      | no      | a later attempt owns the task         |
//	| STARTED, and FirstDelivery                             | no      | a second message under a running UUID |
//	| PENDING, RECEIVED, STARTED, RETRY (Attempt <= attempt) | yes     | sent, redelivered or retried          |
//
// ([StartRequest.Allows] is the table as code.) When it writes, Received
// then Started are stored as the task's state, each with prev's CreatedAt
// when prev exists (their own otherwise), Started with a StartedAt no
// earlier than that CreatedAt (prev's when it is later than Started's own:
// the producer's clock may be ahead of the worker's, and an attempt never
// starts before its task was created), restarting its result expiry as
// SetStates does; a backend that keeps only the current state may store
// Started alone, since nobody can read RECEIVED between two writes of one
// atomic step. When it does not write, nothing changes. Either way the
// result carries prev as it was before the call, so the worker decides
// what to do with a task it may not start from the state it would have
// read with GetState.
//
// Because the read and the write are one step, two concurrent Starts of
// one first attempt (the same request twice) cannot both see the task
// without a state: at most one of them finds prev nil.
type Starter interface {
	Start(ctx context.Context, reqs []StartRequest) []StartResult
}

// StartRequest asks a Starter to begin one attempt of a task.
type StartRequest struct {
	// Received and Started are the states to write, in that order, both
	// for the same TaskUUID, TaskName and Attempt.
	Received, Started *TaskState
	// FirstDelivery: the broker delivers this message for the first time
	// (its delivery count is 1). A first delivery that finds the task
	// STARTED is a second message under the UUID of a running task, not a
	// redelivery of the running one.
	FirstDelivery bool
}

// StartResult is a Starter's answer to one StartRequest.
type StartResult struct {
	// Prev is the task's state before the call, nil when it had none.
	Prev *TaskState
	// Written: Received and Started were stored.
	Written bool
	// Err, when not nil, says the request failed: Prev and Written then
	// mean nothing, and the request may or may not have been written.
	Err error
}

// StartFailed returns n results that each carry err: the answer of a
// Start call that failed as a whole.
func StartFailed(n int, err error) []StartResult {
	res := make([]StartResult, n)
	for i := range res {
		res[i].Err = err
	}
	return res
}

// Allows reports whether r may write its states over prev (nil: no state),
// by the table of [Starter].
func (r StartRequest) Allows(prev *TaskState) bool {
	if prev == nil {
		return true
	}
	name, attempt := r.Started.TaskName, r.Started.Attempt
	switch {
	case prev.TaskName != "" && prev.TaskName != name:
		return false
	case prev.State.Terminal():
		return false
	case prev.Attempt > attempt:
		return false
	case prev.State == StateStarted && r.FirstDelivery:
		return false
	}
	return true
}

// PendingWriter is implemented by backends that can record PENDING only
// where a task has no state yet (SET NX). errand uses it when it sent a
// task under a UUID it generated itself, so that the PENDING write and the
// publish go out at the same time: a worker may then record RECEIVED or
// STARTED before the PENDING lands, and the PENDING must not set it back.
type PendingWriter interface {
	// SetPendingIfAbsent writes each of sts (all PENDING) whose task has
	// no state, restarting its result expiry as SetStates does, and leaves
	// every task that has one untouched, under the batch error convention
	// (see the package doc's "Batch calls"): a task left untouched because
	// it has a state succeeded. Each state is checked and written in one
	// atomic step; the batch need not be one. A task whose state expired
	// counts as having none.
	SetPendingIfAbsent(ctx context.Context, sts []*TaskState) []error
}

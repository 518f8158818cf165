package driver

import (
	"context"
	"time"
)

// Co-location: when a broker and a result backend keep their data on one
// server (one Redis node, one SQL database, one process for the memory
// drivers), one step of that server can do what errand otherwise asks of
// the two drivers in turn: publish a task and record its PENDING, lease a
// message and record its attempt STARTED, ack a delivery and record its
// final state. That is one capability, in three parts:
//
//   - a backend declares where it keeps its data ([Located]);
//   - a broker that understands that declaration offers the one-trip
//     calls for it ([Colocator]);
//   - the calls themselves ([Colocation]).
//
// errand asks once, when it builds a Server: Colocate(backend) answering
// nil (or a broker that is no Colocator, or a backend that is not Located)
// leaves every call on the portable path, which is always correct. A
// broker never recognises a backend by its type or its method set: only
// by the location the backend declares, a value of a type of the driver
// family's own (an internal package both drivers import), so a stranger
// can never be taken for a partner.

// Located is implemented by a driver (a backend; a broker may too) that
// can say where it keeps its data, for brokers that can co-locate with it.
type Located interface {
	// Location returns a value naming the server, database and namespace
	// the driver keeps its data in, of a type only drivers of its own
	// family understand (nil: none to declare). It must not block or do
	// I/O, and returns the same answer on every call.
	Location() any
}

// Colocator is implemented by brokers that can co-locate with a backend:
// do a send, a start or a settle in one step of the server both share.
type Colocator interface {
	// Colocate returns the one-trip calls for be, or nil when the broker
	// cannot reach be's data in one step: be is not Located, its location
	// is not one the broker understands, or it names another server,
	// database or namespace (or, on a sharded server, keys that one step
	// cannot reach together). It must not block or do I/O.
	Colocate(be Backend) Colocation
}

// Colocation is a broker's one-trip calls for one co-located backend (see
// [Colocator]). Each does what a broker call and a backend call would do
// in turn, with the same results; only the number of trips differs. All
// may be called concurrently.
type Colocation interface {
	// Send publishes msgs as Publish does and, in the same step, writes
	// sts (all PENDING) as the backend's PendingWriter.SetPendingIfAbsent
	// would: only where a task has no state, since a worker may record
	// RECEIVED or STARTED before the PENDING lands. The states need not be
	// written in the same atomic step as the messages. errand joins
	// concurrent SendTask calls to one queue into one call, so all msgs of
	// a call share one Queue, and the messages and states of one call need
	// not belong to each other one to one.
	//
	// published reports that the broker accepted every message; an error
	// then comes from the states alone. With published false, errand
	// reports every send of the call failed and frees their unique keys:
	// the publish of one call must be all or nothing (one script, one
	// transaction). errand has already refused any message over
	// Limits().MaxPayload.
	Send(ctx context.Context, sts []*TaskState, msgs []Message) (published bool, err error)

	// FetchStart fetches as Fetch does (queue, limit, lease and the
	// blocking are Fetch's) and, in the same step, begins the attempt of
	// each delivery whose Task is one of tasks (the names the consumer can
	// run now, sorted, any number; errand passes the same slice until
	// they change), as the backend's Starter.Start would for the
	// StartRequest of its message: the task is the message's ID, Task and
	// TaskAttempt, FirstDelivery is Attempt == 1, and the states are
	// RECEIVED and STARTED at at (below). The starter's table
	// (StartRequest.Allows) decides, and only STARTED need be stored.
	//
	// starts[i] answers for ds[i]: nil when the step did not try to start
	// it (its Task not in tasks, or unknown), else Prev and Written as
	// Start answers. A delivery is never handed out with its start
	// undecided. Err set on a start says its answer could not be read
	// (Written still says whether STARTED was written): errand gives that
	// delivery back. at is the time the server read for the step that
	// leased ds, at least to the microsecond (the resolution errand records
	// states at): the StartedAt it wrote — or the previous state's
	// CreatedAt when that is later, as Start writes it — and the CreatedAt
	// of a task that had no state.
	FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) (ds []*Delivery, starts []*StartResult, at time.Time, err error)

	// Settle writes sts[i], the final state of the task of ds[i], as the
	// backend's SetStates would (overwriting, restarting its expiry), and
	// acks ds[i] as Ack does, for every i, in one step; len(sts) ==
	// len(ds), and ds all come from one queue (errand joins concurrent
	// settles up to Limits().MaxAckBatch a call). It answers under the
	// batch error convention of the package doc, per delivery:
	//
	//   - nil: the state is written and the delivery acked;
	//   - an error wrapping ErrLeaseLost: the state is written (as
	//     SetStates before an Ack would have written it), the delivery is
	//     not acked: it may be with another consumer, which finds the
	//     state;
	//   - another error: the delivery is not acked, and its state may or
	//     may not be written.
	//
	// A state is never written after its delivery's ack: a consumer that
	// sees the message gone finds the state. When the backend is a
	// [Canceller] and the task is CANCELLED, sts[i] is not written (a
	// cancel is never overwritten) and ds[i] is acked: the answer is an
	// error wrapping ErrCancelled.
	Settle(ctx context.Context, ds []*Delivery, sts []*TaskState) []error
}

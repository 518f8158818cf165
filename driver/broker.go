package driver

import (
	"context"
	"time"
)

// Message is one encoded task on its way to a queue.
type Message struct {
	// ID identifies the message for deduplication and inspection (the task
	// UUID for messages errand sends).
	ID string
	// Queue is the routing key; never empty when errand publishes.
	Queue string
	// Body is the encoded Signature (opaque to the broker).
	Body []byte
	// NotBefore, when non-zero, is the earliest time the message may be
	// delivered. A broker never delivers early and documents how late it may
	// be; a time beyond the service's maximum delay must still be honoured.
	NotBefore time.Time
	// Priority: higher first, where the broker orders by priority.
	Priority uint8
	// Task is the name of the task Body encodes and TaskAttempt its
	// attempt (1 for the first), where the sender knows them: errand sets
	// both on every message it sends. A StartCarrier keeps them with the
	// message, so that its fetch can begin the attempt without decoding
	// Body; other brokers may ignore them. Empty Task: unknown, and no
	// carried fetch starts the message.
	Task        string
	TaskAttempt int
}

// Delivery is one message handed to a consumer under a lease. Until the lease
// runs out no other consumer receives the message; a consumer settles it with
// exactly one of Ack, Release or Reject (or Archiver.Archive).
type Delivery struct {
	Message
	// Attempt is the broker's count of deliveries of this message, 1 for the
	// first, where the broker knows it; 0 otherwise.
	Attempt int
	// Handle is the broker's own receipt (a lease token, a receipt handle).
	// errand passes it back untouched.
	Handle any
}

// Broker moves encoded tasks from producers to consumers. It is a handful of
// pull-based primitives; the fetch loop, concurrency, retries, lease
// extension, payload checks and the joining of concurrent acks into one
// Ack call live in errand, never in a driver.
//
// All methods may be called concurrently. errand checks ctx before every
// call and, within one Server, never calls a method after Close (it answers
// ErrClosed itself), so a driver need not track whether it is closed except
// to make Close wake blocked Fetch calls. A driver value shared by several
// Servers (or also used directly) may still be called after Close: it must
// then return an error, never panic or block, and a second Close must be
// harmless. A driver maps its service's errors onto this
// package's sentinels (ErrLeaseLost, ErrPayloadTooLarge) so callers can
// test them with errors.Is, and does not retry calls itself unless its
// documentation says so.
type Broker interface {
	// Publish enqueues msgs (one or a batch). It returns only after the
	// broker has accepted every message; on error, some may have been
	// accepted. errand has already refused any message whose Body exceeds
	// Limits().MaxPayload; a driver maps a service's own size refusal onto
	// ErrPayloadTooLarge.
	Publish(ctx context.Context, msgs ...Message) error

	// Fetch blocks until at least one message of queue is due, then returns
	// up to limit of them (limit >= 1), each leased for lease. It returns
	// ctx.Err() promptly when ctx is done and no message was taken, and
	// returns promptly (with any error) once Close is called.
	Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*Delivery, error)

	// Ack removes delivered messages for good: ds, all from one queue
	// (errand joins the acks of concurrent worker slots, up to
	// Limits().MaxAckBatch a call), under the batch error convention (see
	// the package doc's "Batch calls"). A delivery whose lease ran out, and
	// which may be with another consumer, fails with ErrLeaseLost alone;
	// the others are acked.
	Ack(ctx context.Context, ds []*Delivery) []error

	// Release gives a delivered message back to its queue, to be delivered
	// again no earlier than notBefore (zero: at once).
	Release(ctx context.Context, d *Delivery, notBefore time.Time) error

	// Extend renews the lease of a delivery for another lease from now.
	Extend(ctx context.Context, d *Delivery, lease time.Duration) error

	// Reject sets a delivered message aside for good (a dead-letter queue or
	// list), with a reason, so it is never delivered again. A broker that is
	// an Archiver keeps it in its queue's archive, with reason as its
	// Reason. errand rejects messages it cannot decode (and archives them
	// instead on an Archiver).
	Reject(ctx context.Context, d *Delivery, reason string) error

	// Close releases the broker's resources and makes blocked Fetch calls
	// return.
	Close() error
}

// Limits are a broker's declared bounds. Zero means no limit.
type Limits struct {
	MaxPayload  int           // largest message Body in bytes
	MaxDelay    time.Duration // the service's native maximum delay (longer ETAs are still honoured)
	MaxAckBatch int           // most deliveries errand passes to one Ack call (0: no limit)
}

// Limiter is implemented by brokers with a maximum payload or delay.
type Limiter interface {
	Limits() Limits
}

// Purger is implemented by brokers that can drop every pending and delayed
// message of a queue. It returns how many were dropped.
type Purger interface {
	Purge(ctx context.Context, queue string) (int, error)
}

// QueueStats counts what a queue holds.
type QueueStats struct {
	Pending  int // due, not delivered
	Delayed  int // not due yet
	InFlight int // delivered, lease running
	Dead     int // rejected or archived, still kept
	// Completed counts the queue's acks since it began, where the broker
	// keeps the count (a driver.Lister must): a running total whose rate
	// is the queue's throughput. Zero otherwise.
	Completed int64
}

// StatsReporter is implemented by brokers that can count a queue.
type StatsReporter interface {
	Stats(ctx context.Context, queue string) (QueueStats, error)
}

// PendingCarrier is implemented by brokers that can record a result
// backend's PENDING states in the round trip of a publish, because the
// backend keeps them on the broker's own server (errand's Redis broker and
// Redis backend on one Redis). errand asks once, when it builds a Server,
// and then sends each task whose UUID it made itself (SendTask) with one
// call of the returned function instead of a SetPendingIfAbsent and a
// Publish side by side.
type PendingCarrier interface {
	// CarryPending returns a function that publishes and records PENDING
	// for be in one round trip, or nil when the broker cannot carry be's
	// writes: be is not a driver it knows, or keeps its states on another
	// server. It must not block or do I/O.
	CarryPending(be Backend) PublishPendingFunc
}

// PublishPendingFunc publishes msgs as Publish does and, in the same round
// trip, writes sts (all PENDING) as the backend's
// PendingWriter.SetPendingIfAbsent would: only where a task has no state,
// since a worker may record RECEIVED or STARTED before the PENDING lands.
// The states need not be written in the same atomic step as the messages.
// It may be called concurrently: errand joins concurrent SendTask calls to
// one queue into one call, so all msgs of a call share one Queue, and the
// messages and states of one call need not belong to each other one to
// one.
//
// published reports that the broker accepted every message; an error then
// comes from the states alone. With published false, errand reports every
// send of the call failed and frees their unique keys: a broker whose
// publish to one queue is all or nothing (one script, one transaction)
// keeps that true; one that may accept some messages of a call and refuse
// others must not implement PendingCarrier. errand has already refused
// any message over Limits().MaxPayload.
type PublishPendingFunc func(ctx context.Context, sts []*TaskState, msgs []Message) (published bool, err error)

// SettleCarrier is implemented by brokers that can record a result
// backend's final states in the round trip of an ack, because the backend
// keeps them on the broker's own server where one server-side step can
// write both (errand's Redis broker and Redis backend on one Redis node).
// errand asks once, when it builds a Server, and then settles each
// successful task that nothing follows (no callbacks, no chord group, no
// unique key) with one call of the returned function instead of a
// SetStates then an Ack, joining the calls of concurrent worker slots as
// it joins acks.
type SettleCarrier interface {
	// CarrySettle returns a function that writes be's states and acks in
	// one round trip, or nil when the broker cannot carry be's writes: be
	// is not a driver it knows, or keeps its states where the broker's
	// step cannot reach them (another server; another slot of a Redis
	// Cluster). It must not block or do I/O.
	CarrySettle(be Backend) SettleFunc
}

// SettleFunc writes sts[i], the final state of the task of ds[i], as the
// backend's SetStates would (overwriting, restarting its expiry), and
// acks ds[i] as Ack does, for every i, in one round trip; len(sts) ==
// len(ds), and ds all come from one queue (errand joins concurrent
// settles up to Limits().MaxAckBatch a call). It answers under the batch
// error convention of the package doc, per delivery:
//
//   - nil: the state is written and the delivery acked;
//   - an error wrapping ErrLeaseLost: the state is written (as SetStates
//     before an Ack would have written it), the delivery is not acked:
//     it may be with another consumer, which finds the state;
//   - another error: the delivery is not acked, and its state may or may
//     not be written.
//
// A state is never written after its delivery's ack: a consumer that
// sees the message gone finds the state. It may be called concurrently.
type SettleFunc func(ctx context.Context, ds []*Delivery, sts []*TaskState) []error

// StartCarrier is implemented by brokers that can begin the attempts of
// the messages they deliver in the round trip of the fetch, because the
// result backend keeps its states where one step of the broker reaches
// them (errand's Redis broker and Redis backend on one Redis node). errand
// asks once, when it builds a Server, and then a worker on one queue
// fetches with the returned function instead of a Fetch followed by a
// Starter.Start of what it fetched: one round trip from the queue to the
// task's function.
type StartCarrier interface {
	// CarryStart returns a function that fetches and begins attempts in
	// be's states in one round trip, or nil when the broker cannot carry
	// be's writes (be is not a driver it knows, or keeps its states where
	// the broker's step cannot reach them). It must not block or do I/O.
	CarryStart(be Backend) FetchStartFunc
}

// StartSpec says which deliveries of a carried fetch to start.
type StartSpec struct {
	// Tasks are the task names the fetch may start: those the consumer
	// can run now. A message of another task, or without a Task, is
	// delivered unstarted.
	Tasks []string
}

// FetchStartFunc fetches as Fetch does (queue, limit, lease and the
// blocking are Fetch's) and, in the same step, begins the attempt of each
// delivery whose Task is in spec.Tasks, as the backend's Starter.Start
// would for the StartRequest of its message: the task is the message's
// ID, Task and TaskAttempt, FirstDelivery is Attempt == 1, and the states
// are RECEIVED and STARTED at at (below). The starter's table decides, and
// only STARTED need be stored. starts[i] answers for ds[i]: nil when the
// fetch did not try to start it (its Task not in spec.Tasks, or unknown),
// else Prev and Written as Start answers (Err unused). A delivery is
// never handed out with its start undecided. Err set on a start says its
// answer could not be read (Written still says whether STARTED was
// written): errand gives that delivery back. at is the time the broker
// read for the step that leased ds, at least to the microsecond (the
// resolution errand records states at): the StartedAt it wrote — or the
// previous state's CreatedAt when that is later, as Start writes it — and
// the CreatedAt of a task that had no state.
type FetchStartFunc func(ctx context.Context, queue string, limit int, lease time.Duration, spec StartSpec) (ds []*Delivery, starts []*StartResult, at time.Time, err error)

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
	// both on every message it sends. They are metadata about Body, not
	// routing: a broker may ignore them. A co-located broker (see
	// [Colocation]) keeps them with the message — in its ID, a column, a
	// field — so that its FetchStart can begin the attempt without
	// decoding Body. Empty Task: unknown, and no FetchStart starts the
	// message.
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
	// MaxAckFlights is the most Ack calls (and Colocation.Settle calls)
	// of one queue errand keeps in flight at once; acks that come while
	// that many are in flight join the next call (0: errand's default,
	// 4). A broker whose every call costs a transaction declares fewer,
	// so that concurrent acks join into fewer, bigger calls.
	MaxAckFlights int
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

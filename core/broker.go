package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is one encoded task on its way to a queue.
type Message struct {
	// ID identifies the message for deduplication and inspection (the task
	// UUID for messages the core sends).
	ID string
	// Queue is the routing key; never empty when the core publishes.
	Queue string
	// Body is the encoded Signature (opaque to the broker).
	Body []byte
	// NotBefore, when non-zero, is the earliest time the message may be
	// delivered. A broker never delivers early and documents how late it may
	// be; a time beyond the service's maximum delay must still be honoured.
	NotBefore time.Time
	// Priority: higher first, where the broker orders by priority.
	Priority uint8
}

// Delivery is one message handed to a consumer under a lease. Until the lease
// runs out no other consumer receives the message; a consumer settles it with
// exactly one of Ack, Release or Reject.
type Delivery struct {
	Message
	// Attempt is the broker's count of deliveries of this message, 1 for the
	// first, where the broker knows it; 0 otherwise.
	Attempt int
	// Handle is the broker's own receipt (a lease token, a receipt handle).
	// The core passes it back untouched.
	Handle any
}

// Broker moves encoded tasks from producers to consumers. It is a handful of
// pull-based primitives; the fetch loop, concurrency, retries and lease
// extension live in the core's Worker, never in a driver.
//
// All methods may be called concurrently. After Close every method returns
// an error satisfying errors.Is(err, ErrClosed).
type Broker interface {
	// Publish enqueues msgs (one or a batch). It returns only after the
	// broker has accepted every message; on error, some may have been
	// accepted. A message whose Body exceeds the broker's maximum payload is
	// refused with an error satisfying errors.Is(err, ErrPayloadTooLarge)
	// before anything of the batch is sent.
	Publish(ctx context.Context, msgs ...Message) error

	// Fetch blocks until at least one message of queue is due, then returns
	// up to max of them, each leased for lease. It returns ctx.Err() promptly
	// when ctx is done and no message was taken.
	Fetch(ctx context.Context, queue string, max int, lease time.Duration) ([]*Delivery, error)

	// Ack removes a delivered message for good. ErrLeaseLost if the lease ran
	// out and the message may be with another consumer.
	Ack(ctx context.Context, d *Delivery) error

	// Release gives a delivered message back to its queue, to be delivered
	// again no earlier than notBefore (zero: at once).
	Release(ctx context.Context, d *Delivery, notBefore time.Time) error

	// Extend renews the lease of a delivery for another lease from now.
	Extend(ctx context.Context, d *Delivery, lease time.Duration) error

	// Reject sets a delivered message aside for good (a dead-letter queue or
	// list), with a reason, so it is never delivered again. The core rejects
	// messages it cannot decode.
	Reject(ctx context.Context, d *Delivery, reason string) error

	// Close releases the broker's resources. Blocked Fetch calls return.
	Close() error
}

// Limits are a broker's declared bounds. Zero means no limit.
type Limits struct {
	MaxPayload int           // largest message Body in bytes
	MaxDelay   time.Duration // the service's native maximum delay (longer ETAs are still honoured)
}

// Limiter is implemented by brokers with a maximum payload or delay.
type Limiter interface {
	Limits() Limits
}

// Inspector is implemented by brokers that can list what a queue holds.
type Inspector interface {
	// Pending returns messages of queue that are due but not delivered.
	Pending(ctx context.Context, queue string) ([]Message, error)
	// Delayed returns messages of queue that are not due yet.
	Delayed(ctx context.Context, queue string) ([]Message, error)
	// InFlight returns messages of queue delivered and still leased.
	InFlight(ctx context.Context, queue string) ([]Message, error)
}

// DeadLetter is a message set aside by Reject.
type DeadLetter struct {
	Message
	Reason string
	At     time.Time
}

// DeadLetterInspector is implemented by brokers that can list rejected
// messages.
type DeadLetterInspector interface {
	DeadLetters(ctx context.Context, queue string) ([]DeadLetter, error)
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
	Dead     int // rejected
}

// StatsReporter is implemented by brokers that can count a queue.
type StatsReporter interface {
	Stats(ctx context.Context, queue string) (QueueStats, error)
}

// unsupported returns an error satisfying errors.Is(err, errors.ErrUnsupported).
func unsupported(what string, v any) error {
	return fmt.Errorf("errand: %T does not support %s: %w", v, what, errors.ErrUnsupported)
}

// Inspect returns the pending and delayed messages of queue, or an error
// satisfying errors.Is(err, errors.ErrUnsupported) when b cannot list them.
func Inspect(ctx context.Context, b Broker, queue string) (pending, delayed []Message, err error) {
	in, ok := b.(Inspector)
	if !ok {
		return nil, nil, unsupported("inspection", b)
	}
	if pending, err = in.Pending(ctx, queue); err != nil {
		return nil, nil, err
	}
	delayed, err = in.Delayed(ctx, queue)
	return pending, delayed, err
}

// Purge drops every pending and delayed message of queue, or returns an
// error satisfying errors.Is(err, errors.ErrUnsupported).
func Purge(ctx context.Context, b Broker, queue string) (int, error) {
	p, ok := b.(Purger)
	if !ok {
		return 0, unsupported("purge", b)
	}
	return p.Purge(ctx, queue)
}

// Stats counts queue, or returns an error satisfying
// errors.Is(err, errors.ErrUnsupported).
func Stats(ctx context.Context, b Broker, queue string) (QueueStats, error) {
	s, ok := b.(StatsReporter)
	if !ok {
		return QueueStats{}, unsupported("queue stats", b)
	}
	return s.Stats(ctx, queue)
}

// DeadLetters lists the rejected messages of queue, or returns an error
// satisfying errors.Is(err, errors.ErrUnsupported).
func DeadLetters(ctx context.Context, b Broker, queue string) ([]DeadLetter, error) {
	d, ok := b.(DeadLetterInspector)
	if !ok {
		return nil, unsupported("dead-letter inspection", b)
	}
	return d.DeadLetters(ctx, queue)
}

// CheckPayload returns a *PayloadError when body exceeds limit (> 0). Brokers
// call it on every message before sending anything.
func CheckPayload(m Message, limit int) error {
	if limit > 0 && len(m.Body) > limit {
		return &PayloadError{TaskName: m.ID, Size: len(m.Body), Limit: limit}
	}
	return nil
}

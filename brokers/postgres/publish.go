package postgresbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// maxQueueName is the longest queue name in bytes: a NOTIFY payload is
// shorter than 8000 bytes.
const maxQueueName = 7999

// Publish inserts msgs in one statement (any number of them, to any
// queues) and notifies each queue's waiting consumers: in the same
// statement, or, for a queue this broker notified less than a
// millisecond ago, once that millisecond ends (see notifyWindow). A message
// with a NotBefore in the future is due that long after the statement
// runs, on the server's clock (the producer's clock measures only the
// delay). Inside a caller's transaction (errand.WithTx, accepted by
// CheckTx) the statement runs there: the messages exist, and consumers
// are woken, only if and when it commits.
func (b *Broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	a, err := b.publishArgs(msgs)
	if err != nil {
		return err
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	touched := distinct(a.queues)
	if pgdb.InTx(ctx) {
		args := append(a.args(), b.channel, touched)
		if _, err := pgdb.WriterFor(ctx, b.pool).Exec(bounded, b.sql.publish, args...); err != nil {
			return b.fail(ctx, bounded, "publish in the caller's transaction", err)
		}
		return nil
	}
	notifyNow, later := b.notify.split(touched)
	args := append(a.args(), b.channel, notifyNow)
	c, err := b.acquire(ctx, bounded, "publish")
	if err != nil {
		return err
	}
	defer c.Release()
	if _, err := c.Exec(bounded, b.sql.publish, args...); err != nil {
		return b.fail(ctx, bounded, "publish", err)
	}
	// Committed: this process's own consumers look at once, others hear
	// the statement's notification or a trailing one (notify.go).
	b.notify.owe(later)
	for _, q := range touched {
		b.listen.wake(q)
	}
	return nil
}

// publishArrays are the publish statement's first seven arguments: the
// messages' columns, one array each.
type publishArrays struct {
	queues, ids, tasks []string
	bodies             [][]byte
	prios              []int16
	attempts           []int32
	delays             []int64
}

// args returns the arrays in the statement's order.
func (a *publishArrays) args() []any {
	return []any{a.queues, a.ids, a.bodies, a.prios, a.tasks, a.attempts, a.delays}
}

// publishArgs checks msgs as Publish does (a queue name too long, a body
// over MaxPayload: an error naming the message, nothing to publish) and
// returns their columns.
func (b *Broker) publishArgs(msgs []driver.Message) (publishArrays, error) {
	n := len(msgs)
	queues, ids, tasks := make([]string, n), make([]string, n), make([]string, n)
	bodies := make([][]byte, n)
	prios := make([]int16, n)
	attempts := make([]int32, n)
	delays := make([]int64, n)
	now := time.Now()
	for i, m := range msgs {
		if len(m.Queue) > maxQueueName {
			return publishArrays{}, fmt.Errorf("postgres broker: message %s: a queue name of %d bytes; at most %d (the queue is a NOTIFY payload)", m.ID, len(m.Queue), maxQueueName)
		}
		if b.opts.MaxPayload > 0 && len(m.Body) > b.opts.MaxPayload {
			return publishArrays{}, fmt.Errorf("postgres broker: message %s: %d bytes, limit %d: %w", m.ID, len(m.Body), b.opts.MaxPayload, driver.ErrPayloadTooLarge)
		}
		queues[i], ids[i], bodies[i], tasks[i] = m.Queue, m.ID, m.Body, m.Task
		if bodies[i] == nil {
			bodies[i] = []byte{} // bytea NOT NULL
		}
		prios[i], attempts[i] = int16(m.Priority), int32(m.TaskAttempt)
		if !m.NotBefore.IsZero() {
			// Rounded up: never early by a part of a microsecond.
			if d := m.NotBefore.Sub(now); d > 0 {
				delays[i] = (d + time.Microsecond - 1).Microseconds()
			}
		}
	}
	return publishArrays{queues: queues, ids: ids, tasks: tasks, bodies: bodies, prios: prios, attempts: attempts, delays: delays}, nil
}

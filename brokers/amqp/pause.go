package amqpbroker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// A paused queue has a marker: the durable, empty classic queue
// NAME.paused, declared by Pause and deleted by Resume; its existence is
// the flag, on the server, for every process. AMQP cannot list queues, so
// Paused checks the markers of the queues this Broker value knows: every
// queue it published to, fetched from or was named in an operator call
// (Pause, Resume, Stats, Purge, the archive's calls). A Fetch that starts
// a queue's consumer checks its marker first and waits while it exists,
// so a worker that starts on a paused queue, and whose first Paused came
// before its Broker knew the queue, still fetches nothing.

var _ driver.Pauser = (*Broker)(nil)

func pausedName(name string) string { return name + ".paused" }

// know records that errand queue q is in use.
func (b *Broker) know(q string) {
	b.kmu.Lock()
	b.known[q] = struct{}{}
	b.kmu.Unlock()
}

// Pause declares queue's marker NAME.paused (durable, classic, empty).
func (b *Broker) Pause(ctx context.Context, queue string) error {
	if err := b.checkClosed(); err != nil {
		return err
	}
	b.know(queue)
	ctx, cancel := b.bound(ctx)
	defer cancel()
	m := pausedName(b.queueName(queue))
	err := b.con.do(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(m, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
		return err
	})
	if err != nil {
		return fmt.Errorf("amqp broker: pause %s: declare %s: %w", queue, m, err)
	}
	return nil
}

// Resume deletes queue's marker (nothing when there is none).
func (b *Broker) Resume(ctx context.Context, queue string) error {
	if err := b.checkClosed(); err != nil {
		return err
	}
	b.know(queue)
	ctx, cancel := b.bound(ctx)
	defer cancel()
	m := pausedName(b.queueName(queue))
	err := b.con.do(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(m, false, false, false)
		return err
	})
	if err != nil {
		return fmt.Errorf("amqp broker: resume %s: delete %s: %w", queue, m, err)
	}
	return nil
}

// Paused returns the paused queues among those this Broker value knows
// (see above), sorted: one passive declare of each marker.
func (b *Broker) Paused(ctx context.Context) ([]string, error) {
	if err := b.checkClosed(); err != nil {
		return nil, err
	}
	b.kmu.Lock()
	qs := make([]string, 0, len(b.known))
	for q := range b.known {
		qs = append(qs, q)
	}
	b.kmu.Unlock()
	slices.Sort(qs)
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var out []string
	err := b.markers(ctx, qs, func(q string) { out = append(out, q) })
	return out, err
}

// isPaused reports whether queue's marker exists.
func (b *Broker) isPaused(ctx context.Context, queue string) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	paused := false
	err := b.markers(ctx, []string{queue}, func(string) { paused = true })
	return paused, err
}

// markers calls found for each of qs whose marker exists, checked with a
// passive declare on throwaway channels of the consuming connection (a
// failed passive declare closes its channel).
func (b *Broker) markers(ctx context.Context, qs []string, found func(q string)) error {
	if len(qs) == 0 {
		return nil
	}
	conn, err := b.con.connection(ctx)
	if err != nil {
		return err
	}
	return b.con.run(ctx, func() error {
		var ch *amqp.Channel
		defer func() {
			if ch != nil {
				ch.Close()
			}
		}()
		for _, q := range qs {
			if ch == nil {
				var err error
				if ch, err = conn.Channel(); err != nil {
					return fmt.Errorf("amqp broker: open channel: %w", err)
				}
			}
			_, err := ch.QueueDeclarePassive(pausedName(b.queueName(q)), true, false, false, false, nil)
			var ae *amqp.Error
			switch {
			case err == nil:
				found(q)
			case errors.As(err, &ae) && ae.Code == amqp.NotFound:
				ch = nil // RabbitMQ closed it
			default:
				return fmt.Errorf("amqp broker: paused: check %s: %w", q, err)
			}
		}
		return nil
	})
}

// waitResumed returns once queue is not paused (checked every
// pausePoll), or with ctx's error. The first Fetch of a queue calls it.
func (b *Broker) waitResumed(ctx context.Context, queue string) error {
	for {
		paused, err := b.isPaused(ctx, queue)
		if err != nil || !paused {
			return err
		}
		t := time.NewTimer(pausePoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-b.done:
			t.Stop()
			return errClosed
		}
	}
}

// pausePoll is how often a first Fetch of a paused queue checks its marker.
const pausePoll = 500 * time.Millisecond

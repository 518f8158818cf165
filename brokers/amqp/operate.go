package amqpbroker

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// levels returns every delay level up to Options.MaxDelay, shortest first.
func (b *Broker) levels() []time.Duration {
	var ls []time.Duration
	for l := baseLevel; l <= b.opts.MaxDelay; l *= 2 {
		ls = append(ls, l)
	}
	return ls
}

// Stats counts queue with one queue.declare per AMQP queue (AMQP 0-9-1
// counts a queue's ready messages, nothing else): Pending is the
// queue's ready messages (with those that came back early from a delay
// level, on their way to the next), Delayed the ready messages of its
// delay levels, Dead those of NAME.dead. InFlight counts only this
// Broker's own deliveries (leased or buffered): RabbitMQ tells no client
// how many messages other consumers hold. Completed is always 0.
// Declaring the levels creates the missing ones (empty, deleted again
// after x-expires).
func (b *Broker) Stats(ctx context.Context, queue string) (driver.QueueStats, error) {
	if err := b.checkClosed(); err != nil {
		return driver.QueueStats{}, err
	}
	if b.opts.Machinery != nil {
		return b.mStats(ctx, queue)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var st driver.QueueStats
	b.know(queue)
	name := b.queueName(queue)
	var err error
	if st.Dead, err = b.declareCount(ctx, deadName(name), b.deadArgs()); err != nil {
		return st, err
	}
	if st.Pending, err = b.declareCount(ctx, name, b.queueArgs(name)); err != nil {
		return st, err
	}
	for _, l := range b.levels() {
		n, err := b.declareCount(ctx, delayName(name, l), delayArgs(name, l))
		if err != nil {
			return st, err
		}
		st.Delayed += n
	}
	st.InFlight = b.held(queue)
	return st, nil
}

// Purge drops the ready messages of queue and of its delay levels
// (queue.purge of each) and returns how many. Messages delivered and not
// yet acked are not touched.
func (b *Broker) Purge(ctx context.Context, queue string) (int, error) {
	if err := b.checkClosed(); err != nil {
		return 0, err
	}
	if b.opts.Machinery != nil {
		return b.mPurge(ctx, queue)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	b.know(queue)
	name := b.queueName(queue)
	if err := b.ensureQueue(ctx, name); err != nil {
		return 0, err
	}
	names := []string{name}
	for _, l := range b.levels() {
		if err := b.declare(ctx, delayName(name, l), delayArgs(name, l), true); err != nil {
			return 0, err
		}
		names = append(names, delayName(name, l))
	}
	total := 0
	for _, n := range names {
		var got int
		err := b.con.do(ctx, func(ch *amqp.Channel) (err error) {
			got, err = ch.QueuePurge(n, false)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("amqp broker: purge %s: %w", n, err)
		}
		total += got
	}
	return total, nil
}

// held counts the messages of queue this process holds: leased to its
// worker slots, or buffered by its consumer and not yet fetched.
func (b *Broker) held(queue string) int {
	b.cmu.Lock()
	p := b.pullers[queue]
	b.cmu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.leases) + len(p.buf)
}

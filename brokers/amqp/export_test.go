package amqpbroker

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PushRaw puts raw on queue as another program would: a plain
// basic.publish of the bytes, without errand's headers or a message-id.
func PushRaw(ctx context.Context, b *Broker, queue string, raw []byte) error {
	return b.send(ctx, []outgoing{{queue: b.queueName(queue), p: amqp.Publishing{Body: raw, DeliveryMode: amqp.Persistent}}})
}

// Buffered reports how many messages queue's consumer holds buffered
// (pushed, not fetched) and whether the consumer runs.
func Buffered(b *Broker, queue string) (n int, consuming bool) {
	p, err := b.puller(queue)
	if err != nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.buf), p.tag != ""
}

// Consumer reports queue's running consumer: its tag ("" when none) and
// its prefetch.
func Consumer(b *Broker, queue string) (tag string, prefetch int) {
	p, err := b.puller(queue)
	if err != nil {
		return "", 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tag, p.prefetch
}

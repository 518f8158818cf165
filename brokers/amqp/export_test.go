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

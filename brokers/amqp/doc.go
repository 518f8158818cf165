// Package amqpbroker is errand's RabbitMQ broker (AMQP 0-9-1), on
// github.com/rabbitmq/amqp091-go. See docs/amqp.md for the design and its
// reasons.
package amqpbroker

package sqsbroker

import "context"

// QueueURL returns the URL of the SQS queue that carries errand queue
// queue, created where the broker would create it: tests use it to write
// to the queue without errand (conformance.BrokerHarness.PushRaw).
func (b *Broker) QueueURL(ctx context.Context, queue string) (string, error) {
	return b.url(ctx, b.queueName(queue))
}

// ValidQueueName is validName (names_internal_test.go) for the external
// tests.
var ValidQueueName = validName

package redisbroker_test

import (
	"context"
	"errors"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// ackOne acks d alone through the batch-shaped Ack and returns its error.
func ackOne(ctx context.Context, b driver.Broker, d *driver.Delivery) error {
	return errors.Join(b.Ack(ctx, []*driver.Delivery{d})...)
}

// setAside returns queue's archive, oldest first, each entry's Error after
// its Reason where it says more (the text a set-aside message's reason is
// checked against).
func setAside(ctx context.Context, b *redisbroker.Broker, queue string) ([]driver.ArchiveEntry, error) {
	es, err := b.Archived(ctx, queue, 0, 100_000)
	for i := range es {
		if es[i].Error != "" && es[i].Error != es[i].Reason {
			es[i].Reason += ": " + es[i].Error
		}
	}
	for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
		es[i], es[j] = es[j], es[i]
	}
	return es, err
}

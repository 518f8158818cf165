package errand

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// Operations on a broker's queues. Each works on any Broker (a driver's own
// value or one OpenBroker returned) and returns an error satisfying
// errors.Is(err, errors.ErrUnsupported) when the driver cannot do it.

// unsupported returns an error satisfying errors.Is(err, errors.ErrUnsupported).
func unsupported(what string, v any) error {
	return fmt.Errorf("errand: %T does not support %s: %w", v, what, errors.ErrUnsupported)
}

// ability returns b's driver as an I, or an unsupported error.
func ability[I any](ctx context.Context, b Broker, what string) (*broker, I, error) {
	pb, ok := b.(*broker)
	if !ok {
		pb = &broker{drv: b} // a driver's own value: checks only, no ack batching
	}
	var zero I
	if err := pb.before(ctx); err != nil {
		return nil, zero, err
	}
	i, ok := pb.drv.(I)
	if !ok {
		return nil, zero, unsupported(what, pb.drv)
	}
	return pb, i, nil
}

// Inspect returns the pending and delayed messages of queue.
func Inspect(ctx context.Context, b Broker, queue string) (pending, delayed []Message, err error) {
	pb, in, err := ability[driver.Inspector](ctx, b, "inspection")
	if err != nil {
		return nil, nil, err
	}
	if pending, err = in.Pending(ctx, queue); err != nil {
		return nil, nil, pb.after(ctx, err)
	}
	delayed, err = in.Delayed(ctx, queue)
	return pending, delayed, pb.after(ctx, err)
}

// InFlight returns the messages of queue delivered and still leased.
func InFlight(ctx context.Context, b Broker, queue string) ([]Message, error) {
	pb, in, err := ability[driver.Inspector](ctx, b, "inspection")
	if err != nil {
		return nil, err
	}
	ms, err := in.InFlight(ctx, queue)
	return ms, pb.after(ctx, err)
}

// Purge drops every pending and delayed message of queue and returns how
// many it dropped.
func Purge(ctx context.Context, b Broker, queue string) (int, error) {
	pb, p, err := ability[driver.Purger](ctx, b, "purge")
	if err != nil {
		return 0, err
	}
	n, err := p.Purge(ctx, queue)
	return n, pb.after(ctx, err)
}

// Stats counts what queue holds.
func Stats(ctx context.Context, b Broker, queue string) (QueueStats, error) {
	pb, s, err := ability[driver.StatsReporter](ctx, b, "queue stats")
	if err != nil {
		return QueueStats{}, err
	}
	st, err := s.Stats(ctx, queue)
	return st, pb.after(ctx, err)
}

// DeadLetters lists the messages of queue the broker set aside.
func DeadLetters(ctx context.Context, b Broker, queue string) ([]DeadLetter, error) {
	pb, d, err := ability[driver.DeadLetterInspector](ctx, b, "dead-letter inspection")
	if err != nil {
		return nil, err
	}
	dl, err := d.DeadLetters(ctx, queue)
	return dl, pb.after(ctx, err)
}

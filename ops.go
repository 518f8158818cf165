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

// ability returns b's ability I, discovered when b's driver was wrapped
// (abilities.go), after the portable checks of b (ErrClosed, ctx.Err()),
// or an unsupported error naming what. The caller maps the ability's
// errors with after; use does both.
func ability[I any](ctx context.Context, b Broker, what string) (*broker, I, error) {
	pb := asBroker(b) // a driver's own value: wrapped for this call
	var i I
	if err := pb.before(ctx); err != nil {
		return nil, i, err
	}
	if !pb.can.get(&i) {
		return nil, i, unsupported(what, pb.drv)
	}
	return pb, i, nil
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

package errand

import (
	"context"
	"errors"
	"fmt"
)

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

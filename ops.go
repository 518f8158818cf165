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

// ability returns b's ability I, after the portable checks of b
// (ErrClosed, ctx.Err()), or an unsupported error naming what. The caller
// maps the ability's errors with after; use does both.
func ability[I any](ctx context.Context, b Broker, what string) (*broker, I, error) {
	pb := asBroker(b) // a driver's own value: wrapped for this call
	var i I
	if err := pb.before(ctx); err != nil {
		return nil, i, err
	}
	i, ok := pb.drv.(I)
	if !ok {
		return nil, i, unsupported(what, pb.drv)
	}
	return pb, i, nil
}

package errand

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// A driver's optional abilities (driver/doc.go lists them) are discovered
// here, once, when the portable layer wraps the driver: the engine reads
// the fields below (nil where the driver lacks the ability). Operator
// calls reach an ability through ability, use or useErr (below),
// which make the portable checks every call makes.

// brokerAbilities are a broker driver's optional interfaces.
type brokerAbilities struct {
	limiter     driver.Limiter
	stats       driver.StatsReporter
	purger      driver.Purger
	queues      driver.QueueLister
	knower      driver.QueueKnower
	lister      driver.Lister
	finder      driver.Finder
	archiver    driver.Archiver
	pauser      driver.Pauser
	heartbeater driver.Heartbeater
	uniquer     driver.Uniquer
	rateLimiter driver.RateLimiter
	schedules   driver.ScheduleStore
	colocator   driver.Colocator
}

// discoverBroker finds b's optional interfaces.
func discoverBroker(b driver.Broker) brokerAbilities {
	var a brokerAbilities
	a.limiter, _ = b.(driver.Limiter)
	a.stats, _ = b.(driver.StatsReporter)
	a.purger, _ = b.(driver.Purger)
	a.queues, _ = b.(driver.QueueLister)
	a.knower, _ = b.(driver.QueueKnower)
	a.lister, _ = b.(driver.Lister)
	a.finder, _ = b.(driver.Finder)
	a.archiver, _ = b.(driver.Archiver)
	a.pauser, _ = b.(driver.Pauser)
	a.heartbeater, _ = b.(driver.Heartbeater)
	a.uniquer, _ = b.(driver.Uniquer)
	a.rateLimiter, _ = b.(driver.RateLimiter)
	a.schedules, _ = b.(driver.ScheduleStore)
	a.colocator, _ = b.(driver.Colocator)
	return a
}

// discoverBackend finds b.drv's optional interfaces.
func discoverBackend(b *backend) {
	b.waiter, _ = b.drv.(driver.StateWaiter)
	b.starter, _ = b.drv.(driver.Starter)
	b.pending, _ = b.drv.(driver.PendingWriter)
	b.expirer, _ = b.drv.(driver.Expirer)
}

// use calls f with b's ability I under the portable checks: ErrClosed
// after Close and ctx.Err() when ctx is done, without reaching the driver;
// an error satisfying errors.ErrUnsupported, naming what, when the driver
// lacks I; and f's error mapped as every driver error is (broker.after).
func use[I, R any](ctx context.Context, b *broker, what string, f func(I) (R, error)) (R, error) {
	var zero R
	_, i, err := ability[I](ctx, b, what)
	if err != nil {
		return zero, err
	}
	r, err := f(i)
	if err != nil {
		return zero, b.after(ctx, err)
	}
	return r, nil
}

// useErr is use for an ability call that returns only an error.
func useErr[I any](ctx context.Context, b *broker, what string, f func(I) error) error {
	_, err := use(ctx, b, what, func(i I) (struct{}, error) { return struct{}{}, f(i) })
	return err
}

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

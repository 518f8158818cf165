package portable

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// A driver's optional capabilities (driver/doc.go lists them) are
// discovered here, once, when the portable layer wraps the driver: the
// engine reads the fields below (nil where the driver lacks the
// capability). Operator calls reach a capability through Capability, Use
// or UseErr (below), which make the portable checks every call makes.

// Capabilities are a broker driver's optional interfaces.
type Capabilities struct {
	Limiter     driver.Limiter
	Stats       driver.StatsReporter
	Purger      driver.Purger
	Queues      driver.QueueLister
	Knower      driver.QueueKnower
	Lister      driver.Lister
	Finder      driver.Finder
	Archiver    driver.Archiver
	Pauser      driver.Pauser
	Heartbeater driver.Heartbeater
	Uniquer     driver.Uniquer
	RateLimiter driver.RateLimiter
	Schedules   driver.ScheduleStore
	Colocator   driver.Colocator
	Transactor  driver.Transactor
	// CancelNotifier tells every worker of a cancel at once
	// (driver.CancelNotifier); nil: workers find it at their next lease
	// extension.
	CancelNotifier driver.CancelNotifier
}

// discoverBroker finds b's optional interfaces.
func discoverBroker(b driver.Broker) Capabilities {
	var a Capabilities
	a.Limiter, _ = b.(driver.Limiter)
	a.Stats, _ = b.(driver.StatsReporter)
	a.Purger, _ = b.(driver.Purger)
	a.Queues, _ = b.(driver.QueueLister)
	a.Knower, _ = b.(driver.QueueKnower)
	a.Lister, _ = b.(driver.Lister)
	a.Finder, _ = b.(driver.Finder)
	a.Archiver, _ = b.(driver.Archiver)
	a.Pauser, _ = b.(driver.Pauser)
	a.Heartbeater, _ = b.(driver.Heartbeater)
	a.Uniquer, _ = b.(driver.Uniquer)
	a.RateLimiter, _ = b.(driver.RateLimiter)
	a.Schedules, _ = b.(driver.ScheduleStore)
	a.Colocator, _ = b.(driver.Colocator)
	a.Transactor, _ = b.(driver.Transactor)
	a.CancelNotifier, _ = b.(driver.CancelNotifier)
	return a
}

// discoverBackend finds b.Drv's optional interfaces.
func discoverBackend(b *Backend) {
	b.waiter, _ = b.Drv.(driver.StateWaiter)
	b.Starter, _ = b.Drv.(driver.Starter)
	b.Pending, _ = b.Drv.(driver.PendingWriter)
	b.expirer, _ = b.Drv.(driver.Expirer)
	b.Transactor, _ = b.Drv.(driver.Transactor)
	b.Canceller, _ = b.Drv.(driver.Canceller)
}

// Use calls f with b's capability I under the portable checks:
// driver.ErrClosed after Close and ctx.Err() when ctx is done, without
// reaching the driver; an error satisfying errors.ErrUnsupported, naming
// what, when the driver lacks I; and f's error mapped as every driver
// error is (Broker.After).
func Use[I, R any](ctx context.Context, b *Broker, what string, f func(I) (R, error)) (R, error) {
	var zero R
	_, i, err := Capability[I](ctx, b, what)
	if err != nil {
		return zero, err
	}
	r, err := f(i)
	if err != nil {
		return zero, b.After(ctx, err)
	}
	return r, nil
}

// UseErr is Use for a capability call that returns only an error.
func UseErr[I any](ctx context.Context, b *Broker, what string, f func(I) error) error {
	_, err := Use(ctx, b, what, func(i I) (struct{}, error) { return struct{}{}, f(i) })
	return err
}

// Unsupported returns an error satisfying errors.Is(err, errors.ErrUnsupported).
func Unsupported(what string, v any) error {
	return fmt.Errorf("errand: %T does not support %s: %w", v, what, errors.ErrUnsupported)
}

// Capability returns b's capability I, after the portable checks of b
// (driver.ErrClosed, ctx.Err()), or an unsupported error naming what. The
// caller maps the capability's errors with Broker.After; Use does both.
func Capability[I any](ctx context.Context, b driver.Broker, what string) (*Broker, I, error) {
	pb := WrapBroker(b) // a driver's own value: wrapped for this call
	var i I
	if err := pb.Before(ctx); err != nil {
		return nil, i, err
	}
	i, ok := pb.Drv.(I)
	if !ok {
		return nil, i, Unsupported(what, pb.Drv)
	}
	return pb, i, nil
}

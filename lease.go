package errand

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
)

// leaseParams are what a leaseExtender needs of its worker.
type leaseParams struct {
	broker *broker
	lease  time.Duration // WorkerConfig.Lease
	every  time.Duration // WorkerConfig.ExtendEvery
	bound  time.Duration // WorkerConfig.CallTimeout
	calls  context.Context
	report func(err error, msg string, attrs ...any)
}

// leaseExtender renews the leases of the deliveries a worker holds, one
// goroutine per delivery from its fetch (or its runner picking it up)
// until it is settled. It owns those goroutines: wait returns once every
// one has returned.
type leaseExtender struct {
	leaseParams
	wg sync.WaitGroup
}

func newLeaseExtender(p leaseParams) *leaseExtender { return &leaseExtender{leaseParams: p} }

// extension is the renewal of one delivery's lease.
type extension struct {
	quit chan struct{}
	done chan struct{}
	once sync.Once
	// lost is cancelled, with a cause wrapping ErrLeaseLost, once the
	// lease is known lost; the task's ctx follows it (taskContext).
	lost context.Context
	lose context.CancelCauseFunc
}

// lostCause returns why the lease is lost (wrapping ErrLeaseLost), or nil
// while it is not known lost. A nil extension's lease is never lost.
func (e *extension) lostCause() error {
	if e == nil || e.lost.Err() == nil {
		return nil
	}
	return context.Cause(e.lost)
}

// stop ends the renewals: none starts after it returns (one under way
// ends by its own deadline). Calling it again does nothing.
func (e *extension) stop() { e.once.Do(func() { close(e.quit) }) }

// wait returns once the renewing goroutine has returned (after stop).
func (e *extension) wait() { <-e.done }

// halt stops the renewals and waits for them: no renewal can follow.
func (e *extension) halt() {
	e.stop()
	e.wait()
}

// wait returns once every extension's goroutine has returned.
func (x *leaseExtender) wait() { x.wg.Wait() }

// start renews d's lease every ExtendEvery until the extension is
// stopped. Each renewal is bounded by ExtendEvery/2 (so Shutdown is not
// held by a silent server). A failed renewal is retried with a short
// backoff instead of waiting for the next tick, for as long as the lease
// may still hold: an outage shorter than what is left of the lease costs
// nothing. Errors are reported once per outage, not once per try.
//
// The lease is lost when the broker answers driver.ErrLeaseLost (it may
// have handed the message to another consumer), or when, on the worker's
// clock, the lease has run out with every renewal since the last success
// failed (the last try is made as it runs out). Either ends the renewals,
// reported once, and cancels the extension's lost ctx with a cause
// wrapping ErrLeaseLost. Renewals also end once every call is cancelled
// (the settle grace is over).
//
// got is when the Fetch that leased d returned: the lease began just
// before, so the worker's clock believes it ends later than it does by the
// reply's trip at most, not by the time the delivery waited for a runner.
func (x *leaseExtender) start(d *driver.Delivery, got time.Time) *extension {
	if got.IsZero() {
		got = time.Now()
	}
	e := &extension{quit: make(chan struct{}), done: make(chan struct{})}
	e.lost, e.lose = context.WithCancelCause(context.Background())
	x.wg.Go(func() {
		defer close(e.done)
		x.renew(d, e, got)
	})
	return e
}

func (x *leaseExtender) renew(d *driver.Delivery, e *extension, got time.Time) {
	quit := e.quit
	every := x.every
	leaseEnd := got.Add(x.lease) // see start
	extend := func() error {
		start := time.Now()
		ctx, cancel := context.WithTimeout(x.calls, min(every/2, x.bound))
		defer cancel()
		err := x.broker.Extend(ctx, d, x.lease)
		if err == nil {
			leaseEnd = start.Add(x.lease) // granted no earlier than the call began
		}
		return err
	}
	// sleep waits for d, or reports false when stop was called.
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-quit:
			return false
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	outage := false // a renewal failed and none has succeeded since
	retryable := func(err error) bool {
		return err != nil && !errors.Is(err, driver.ErrLeaseLost) && !errors.Is(err, ErrClosed) && x.calls.Err() == nil
	}
	for {
		select {
		case <-quit:
			return
		case <-x.calls.Done():
			return // the settle grace is over: no call can be made
		case <-t.C:
		}
		err := extend()
		for wait := every / 20; retryable(err); wait = min(2*wait, every/10) {
			if !outage {
				outage = true
				x.report(err, "errand: extend lease failed; retrying while the lease lasts", "message", d.ID, "queue", d.Queue, "lease_left", time.Until(leaseEnd))
			}
			left := time.Until(leaseEnd)
			if left <= 0 {
				// The lease has run out on our clock (the last try was made
				// as it did): the broker may hand the message to another
				// consumer, if it has not already.
				cause := fmt.Errorf("%w: message %q on queue %q: lease of %v not renewed in time (last error: %v); the task may run again elsewhere", ErrLeaseLost, d.ID, d.Queue, x.lease, err)
				e.lose(cause)
				x.report(cause, "errand: lease ran out during an outage; the task's ctx is cancelled", "message", d.ID, "queue", d.Queue)
				return
			}
			if !sleep(min(wait, left)) {
				return
			}
			err = extend()
		}
		switch {
		case err == nil:
			outage = false
		case errors.Is(err, driver.ErrLeaseLost) && stopped(quit):
			// The delivery was settled (acked or released) while this
			// renewal was under way: nothing is lost, nothing to report.
			return
		case errors.Is(err, driver.ErrLeaseLost):
			e.lose(err)
			x.report(err, "errand: lease lost; no longer extended, the task's ctx is cancelled (another consumer may run the task)", "message", d.ID, "queue", d.Queue)
			return
		case errors.Is(err, ErrClosed):
			return
		}
	}
}

// stopped reports whether quit is closed.
func stopped(quit <-chan struct{}) bool {
	select {
	case <-quit:
		return true
	default:
		return false
	}
}

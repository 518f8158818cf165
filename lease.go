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
// nothing. Errors are reported once per outage, not once per try;
// driver.ErrLeaseLost (the broker may have handed the message to another
// consumer) ends the renewals, reported once.
func (x *leaseExtender) start(d *driver.Delivery) *extension {
	e := &extension{quit: make(chan struct{}), done: make(chan struct{})}
	x.wg.Go(func() {
		defer close(e.done)
		x.renew(d, e.quit)
	})
	return e
}

func (x *leaseExtender) renew(d *driver.Delivery, quit <-chan struct{}) {
	every := x.every
	// The lease was granted during the fetch, just before now: its end is
	// estimated a little late, never early by more than that.
	leaseEnd := time.Now().Add(x.lease)
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
	outage := false  // a renewal failed and none has succeeded since
	expired := false // the outage outlasted the lease (reported)
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		err := extend()
		for wait := every / 20; err != nil && !errors.Is(err, driver.ErrLeaseLost) && !errors.Is(err, ErrClosed) && x.calls.Err() == nil; wait = min(2*wait, every/10) {
			if !outage {
				outage = true
				x.report(err, "errand: extend lease failed; retrying while the lease lasts", "message", d.ID, "queue", d.Queue, "lease_left", time.Until(leaseEnd))
			}
			if !time.Now().Add(wait).Before(leaseEnd) {
				// The lease has run out on our clock: the broker may hand
				// the message to another consumer. Keep trying at the
				// tick's pace, in case none took it.
				if !expired {
					expired = true
					x.report(fmt.Errorf("errand: message %q: lease not renewed within %v (last error: %w); the task may run again elsewhere", d.ID, x.lease, err),
						"errand: lease ran out during an outage", "message", d.ID, "queue", d.Queue)
				}
				break
			}
			if !sleep(wait) {
				return
			}
			err = extend()
		}
		switch {
		case err == nil:
			outage, expired = false, false
		case errors.Is(err, driver.ErrLeaseLost):
			x.report(err, "errand: lease lost; no longer extended (another consumer may run the task)", "message", d.ID, "queue", d.Queue)
			return
		case errors.Is(err, ErrClosed):
			return
		}
	}
}

// Package lease renews the leases of the deliveries a worker holds
// (driver.Broker.Extend through the portable layer), one Extender per
// worker, one Extension per delivery, from its fetch until it is settled;
// and tells the task when its lease is lost (Extension.LostCause,
// Extension.Follow). It knows nothing of the task a delivery carries.
package lease

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// Params are what an Extender needs of its worker.
type Params struct {
	Broker *portable.Broker
	Lease  time.Duration // WorkerConfig.Lease
	Every  time.Duration // WorkerConfig.ExtendEvery
	Bound  time.Duration // WorkerConfig.CallTimeout
	Calls  context.Context
	Report func(err error, msg string, attrs ...any)
}

// Extender renews the leases of the deliveries a worker holds, from
// each one's fetch (or its runner picking it up) until it is settled. One
// goroutine (loop) serves them all: it keeps the extensions in a heap by
// their next renewal and sleeps until the earliest; a renewal that comes
// due runs in a goroutine of its own, so one slow call holds no other.
// A task that ends within ExtendEvery costs no goroutine and no timer.
// The loop runs while there are extensions to renew. It owns those
// goroutines: Wait returns once every one has returned.
type Extender struct {
	Params
	wg   sync.WaitGroup
	mu   sync.Mutex
	due  extHeap       // the extensions waiting for their next renewal
	on   bool          // the loop is running
	wake chan struct{} // tells the loop the heap's earliest changed
}

// New returns an Extender with p; its loop starts with the first
// extension.
func New(p Params) *Extender {
	return &Extender{Params: p, wake: make(chan struct{}, 1)}
}

// Extension is the renewal of one delivery's lease. Its fields other than
// lost and lose are guarded by its extender's mu, except leaseEnd and
// outage, which only its renewal (one at a time) uses.
type Extension struct {
	x        *Extender
	d        *driver.Delivery
	next     time.Time // when its next renewal is due
	index    int       // its place in the extender's heap; -1: not in it
	leaseEnd time.Time // when the lease runs out on the worker's clock
	outage   bool      // a renewal failed and none has succeeded since
	stopped  bool
	quit     chan struct{} // made when a renewal starts; closed by Stop
	running  sync.WaitGroup
	// The loss of the lease, guarded by lossMu: lost is set once, to a
	// cause wrapping driver.ErrLeaseLost, when the lease is known lost, and the
	// task's ctx (onLoss, taskContext) is cancelled with it.
	lossMu sync.Mutex
	lost   error
	onLoss context.CancelCauseFunc
	// onRenew is told of each successful renewal (OnRenew), guarded by
	// lossMu.
	onRenew Renewed
}

// Renewed is told of each successful renewal of a lease (Extension.OnRenew).
type Renewed interface {
	// Renewed is called on the renewal's goroutine once the lease was
	// extended, before the next renewal is scheduled, with a ctx bounded
	// as a renewal is (ExtendEvery/2, CallTimeout, ended with the calls).
	// It must return by its ctx's end.
	Renewed(ctx context.Context)
}

// OnRenew has r told of each successful renewal from now on; nil ends
// it. errand checks there whether the running task was cancelled.
func (e *Extension) OnRenew(r Renewed) {
	e.lossMu.Lock()
	e.onRenew = r
	e.lossMu.Unlock()
}

// LostCause returns why the lease is lost (wrapping driver.ErrLeaseLost), or nil
// while it is not known lost. A nil extension's lease is never lost.
func (e *Extension) LostCause() error {
	if e == nil {
		return nil
	}
	e.lossMu.Lock()
	defer e.lossMu.Unlock()
	return e.lost
}

// lose records that the lease is lost, for cause, and cancels the ctx
// that follows it; only the first call counts.
func (e *Extension) lose(cause error) {
	e.lossMu.Lock()
	if e.lost != nil {
		e.lossMu.Unlock()
		return
	}
	e.lost = cause
	cancel := e.onLoss
	e.lossMu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// Follow has cancel called with the loss's cause once the lease is lost
// (at once when it is lost already), until Unfollow.
func (e *Extension) Follow(cancel context.CancelCauseFunc) {
	e.lossMu.Lock()
	lost := e.lost
	if lost == nil {
		e.onLoss = cancel
	}
	e.lossMu.Unlock()
	if lost != nil {
		cancel(lost)
	}
}

// Unfollow ends what Follow began.
func (e *Extension) Unfollow() {
	e.lossMu.Lock()
	e.onLoss = nil
	e.lossMu.Unlock()
}

// Stop ends the renewals: none starts after it returns (one under way
// ends by its own deadline). Calling it again does nothing.
func (e *Extension) Stop() {
	x := e.x
	x.mu.Lock()
	defer x.mu.Unlock()
	if e.stopped {
		return
	}
	e.stopped = true
	if e.quit != nil {
		close(e.quit)
	}
	if e.index >= 0 {
		heap.Remove(&x.due, e.index)
		if len(x.due) == 0 {
			x.poke() // the loop may end
		}
		// Otherwise the loop is left asleep: it wakes by e's time at the
		// latest, never later than the earliest left, and looks again (a
		// wake per settled task would cost more).
	}
}

// Wait returns once no renewal is under way (after Stop).
func (e *Extension) Wait() { e.running.Wait() }

// Halt stops the renewals and waits for them: no renewal can follow.
func (e *Extension) Halt() {
	e.Stop()
	e.Wait()
}

// Wait returns once every goroutine of the extender has returned.
func (x *Extender) Wait() { x.wg.Wait() }

// Start renews d's lease every ExtendEvery until the extension is
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
// reported once, and records the loss with a cause wrapping
// driver.ErrLeaseLost (LostCause), cancelling the task's ctx with it
// (Follow). Renewals also end once every call is cancelled (the settle
// grace is over).
//
// got is when the Fetch that leased d returned: the lease began just
// before, so the worker's clock believes it ends later than it does by the
// reply's trip at most, not by the time the delivery waited for a runner.
func (x *Extender) Start(d *driver.Delivery, got time.Time) *Extension {
	return x.StartIn(new(Extension), d, got)
}

// StartIn is Start with the extension in e, which must be zero (a
// delivery's own: one allocation less per delivery).
func (x *Extender) StartIn(e *Extension, d *driver.Delivery, got time.Time) *Extension {
	now := time.Now()
	if got.IsZero() {
		got = now
	}
	e.x, e.d, e.index, e.leaseEnd, e.next = x, d, -1, got.Add(x.Lease), now.Add(x.Every)
	x.mu.Lock()
	x.schedule(e)
	x.mu.Unlock()
	return e
}

// schedule puts e in the heap at its next time and has the loop run (or
// look again, when e comes first). x.mu is held.
func (x *Extender) schedule(e *Extension) {
	heap.Push(&x.due, e)
	if !x.on {
		x.on = true
		x.wg.Add(1)
		go x.loop()
		return
	}
	if e.index == 0 {
		x.poke()
	}
}

// poke wakes the loop without blocking. x.mu is held.
func (x *Extender) poke() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// loop starts each extension's renewal when it comes due; it returns when
// no extension waits (schedule starts it again) or every call is
// cancelled.
func (x *Extender) loop() {
	defer x.wg.Done()
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		x.mu.Lock()
		if len(x.due) == 0 || x.Calls.Err() != nil {
			x.on = false
			x.mu.Unlock()
			return
		}
		now := time.Now()
		for len(x.due) > 0 && !x.due[0].next.After(now) {
			e := heap.Pop(&x.due).(*Extension)
			if e.quit == nil {
				e.quit = make(chan struct{})
			}
			e.running.Add(1)
			x.wg.Add(1)
			go x.renew(e)
		}
		var sleep time.Duration
		if len(x.due) > 0 {
			sleep = x.due[0].next.Sub(now)
		}
		x.mu.Unlock()
		if sleep == 0 {
			continue // nothing waits: end, unless a renewal put one back
		}
		if t == nil {
			t = time.NewTimer(sleep)
		} else {
			t.Reset(sleep)
		}
		select {
		case <-t.C:
		case <-x.wake:
		case <-x.Calls.Done():
		}
	}
}

// renew makes one renewal of e's lease (with its retries), then puts e
// back in the heap for the next unless it was stopped or the lease lost.
func (x *Extender) renew(e *Extension) {
	defer x.wg.Done()
	defer e.running.Done()
	if !x.renewOnce(e) {
		return
	}
	e.lossMu.Lock()
	r := e.onRenew
	e.lossMu.Unlock()
	if r != nil && !stopped(e.quit) {
		ctx, cancel := context.WithTimeout(x.Calls, min(x.Every/2, x.Bound))
		r.Renewed(ctx)
		cancel()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if e.stopped {
		return
	}
	e.next = e.next.Add(x.Every)
	if now := time.Now(); e.next.Before(now) {
		e.next = now // a late renewal: the next is due at once, as a ticker's
	}
	x.schedule(e)
}

// renewOnce extends e's lease, retrying as Start says; it reports whether
// the renewals go on.
func (x *Extender) renewOnce(e *Extension) bool {
	d, quit, every := e.d, e.quit, x.Every
	extend := func() error {
		start := time.Now()
		ctx, cancel := context.WithTimeout(x.Calls, min(every/2, x.Bound))
		defer cancel()
		err := x.Broker.Extend(ctx, d, x.Lease)
		if err == nil {
			e.leaseEnd = start.Add(x.Lease) // granted no earlier than the call began
		}
		return err
	}
	// sleep waits for d, or reports false when Stop was called.
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
	retryable := func(err error) bool {
		return err != nil && !errors.Is(err, driver.ErrLeaseLost) && !errors.Is(err, driver.ErrClosed) && x.Calls.Err() == nil
	}
	if stopped(quit) || x.Calls.Err() != nil {
		return false
	}
	err := extend()
	for wait := every / 20; retryable(err); wait = min(2*wait, every/10) {
		if !e.outage {
			e.outage = true
			x.Report(err, "errand: extend lease failed; retrying while the lease lasts", "message", d.ID, "queue", d.Queue, "lease_left", time.Until(e.leaseEnd))
		}
		left := time.Until(e.leaseEnd)
		if left <= 0 {
			// The lease has run out on our clock (the last try was made
			// as it did): the broker may hand the message to another
			// consumer, if it has not already.
			cause := fmt.Errorf("%w: message %q on queue %q: lease of %v not renewed in time (last error: %v); the task may run again elsewhere", driver.ErrLeaseLost, d.ID, d.Queue, x.Lease, err)
			e.lose(cause)
			x.Report(cause, "errand: lease ran out during an outage; the task's ctx is cancelled", "message", d.ID, "queue", d.Queue)
			return false
		}
		if !sleep(min(wait, left)) {
			return false
		}
		err = extend()
	}
	switch {
	case err == nil:
		e.outage = false
		return true
	case errors.Is(err, driver.ErrLeaseLost) && stopped(quit):
		// The delivery was settled (acked or released) while this
		// renewal was under way: nothing is lost, nothing to report.
		return false
	case errors.Is(err, driver.ErrLeaseLost):
		e.lose(err)
		x.Report(err, "errand: lease lost; no longer extended, the task's ctx is cancelled (another consumer may run the task)", "message", d.ID, "queue", d.Queue)
		return false
	default: // driver.ErrClosed, or every call cancelled
		return false
	}
}

// extHeap orders extensions by their next renewal (container/heap).
type extHeap []*Extension

func (h extHeap) Len() int           { return len(h) }
func (h extHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h extHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *extHeap) Push(v any) {
	e := v.(*Extension)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *extHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
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

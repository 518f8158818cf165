package errand

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// Concurrency limits, fleet-wide: per task name (WithConcurrencyLimit)
// and per queue (WorkerConfig.QueueConcurrencyLimit), kept as slots on
// the broker's server (driver.ConcurrencyLimiter), so every worker of
// every process on it takes its slots from one count. Before an attempt
// starts (before RECEIVED and STARTED are recorded), its worker takes a
// slot of its task's limit and of its queue's, both or neither, in one
// Acquire; the slots are held under a lease of the worker's Lease,
// renewed at each extension of the delivery's lease while the task runs
// (delivery.Renewed, lease.Extension.OnRenew), and freed as soon as the
// task's function returns, before the outcome is recorded. An attempt
// refused a slot goes back to its queue after a short backoff
// (slotBackoff), recording nothing: its attempt and retries are
// untouched, as with a rate limit. A killed worker's slots lapse on their
// own, a Lease after their last renewal. See docs/flow-control.md.

// WithConcurrencyLimit caps how many attempts of the task run at once
// across every worker on the broker's server: at most n (1 or more). An
// attempt over the cap is delivered again a little later, never failed,
// and does not count as an attempt. The broker must keep concurrency
// limits (driver.ConcurrencyLimiter: the memory, Redis and PostgreSQL
// brokers do); Register refuses the option on one that does not, with an
// error satisfying errors.Is(err, errors.ErrUnsupported), and refuses an
// n below 1.
//
// Every process registering the task should give it the same n: a slot
// is taken under the limit its taker passes.
func WithConcurrencyLimit(n int) TaskOption {
	return func(t *task) { t.concurrency = &n }
}

// checkConcurrencyLimit refuses a limit the broker cannot keep or that
// makes no sense.
func (s *Server) checkConcurrencyLimit(t *task) error {
	if t.concurrency == nil {
		return nil
	}
	if n := *t.concurrency; n < 1 {
		return fmt.Errorf("errand: register %q: WithConcurrencyLimit(%d): the limit must be 1 or more tasks at once", t.name, n)
	}
	if s.broker.Can.ConcurrencyLimiter == nil {
		return fmt.Errorf("errand: register %q: WithConcurrencyLimit: %w", t.name, portable.Unsupported("concurrency limits", s.broker.Drv))
	}
	return nil
}

// checkQueueConcurrencyLimit refuses WorkerConfig.QueueConcurrencyLimit on a
// broker that cannot keep it (the values are checked by validate).
func (s *Server) checkQueueConcurrencyLimit(cfg WorkerConfig) error {
	if len(cfg.QueueConcurrencyLimit) == 0 || s.broker.Can.ConcurrencyLimiter != nil {
		return nil
	}
	return fmt.Errorf("errand: WorkerConfig.QueueConcurrencyLimit: %w", portable.Unsupported("concurrency limits", s.broker.Drv))
}

// The keys of the limits on the broker: a namespace of their own
// (the broker keeps them apart from its rate-limit buckets).
func taskSlotKey(name string) string   { return "task:" + name }
func queueSlotKey(queue string) string { return "queue:" + queue }

// heldSlots are the slots a delivery's attempt holds, from their Acquire
// until they are freed; mu orders their renewals and their Free, so no
// renewal follows the Free.
type heldSlots struct {
	mu      sync.Mutex
	holder  string
	keys    []string
	freed   bool
	lost    bool // a renewal answered ErrLeaseLost (reported once)
	failing bool // the latest renewal failed otherwise (reported once a run)
}

// lock locks hs and returns it, or returns nil when hs is nil (no slots
// held) or its slots were freed (unlocked again).
func (hs *heldSlots) lock() *heldSlots {
	if hs == nil {
		return nil
	}
	hs.mu.Lock()
	if hs.freed {
		hs.mu.Unlock()
		return nil
	}
	return hs
}

// slotsOf returns the slots dv's attempt must take: its task's, and its
// queue's on this worker; none (nil) when neither is limited.
func (dv *delivery) slotsOf() []driver.Slot {
	var slots []driver.Slot
	if n := dv.tk.concurrency; n != nil {
		slots = append(slots, driver.Slot{Key: taskSlotKey(dv.tk.name), Limit: *n})
	}
	if n := dv.w.cfg.QueueConcurrencyLimit[dv.queue]; n > 0 {
		slots = append(slots, driver.Slot{Key: queueSlotKey(dv.queue), Limit: n})
	}
	return slots
}

// takeSlots takes the slots of dv's attempt, if it has any, holding them
// under a lease of the worker's Lease renewed with the delivery's. It
// returns settleThrottle when one is full (nothing taken), settleRequeue
// when the broker failed, and settleAck (meaning: go on) otherwise.
func (dv *delivery) takeSlots(ctx context.Context) (settle, error) {
	slots := dv.slotsOf()
	if slots == nil {
		return settleAck, nil
	}
	w, sig := dv.w, dv.sig
	hs := &heldSlots{holder: w.id + "/" + sig.UUID + "/" + strconv.Itoa(dv.d.Attempt), keys: make([]string, len(slots))}
	for i, s := range slots {
		hs.keys[i] = s.Key
	}
	ok, err := portable.Use(ctx, w.srv.broker, "concurrency limits", func(cl driver.ConcurrencyLimiter) (bool, error) {
		return cl.Acquire(ctx, hs.holder, slots, w.cfg.Lease)
	})
	switch {
	case err != nil: // the broker failed, or it keeps no limits (registered on another server's broker)
		return settleRequeue, fmt.Errorf("errand: task %s (%s): take its concurrency slots: %w", sig.Name, sig.UUID, err)
	case !ok:
		return settleThrottle, &throttledError{name: sig.Name, over: "concurrency limit", wait: slotBackoff(dv.d.Attempt)}
	}
	dv.slots = hs
	return settleAck, nil
}

// slotBackoff is how long an attempt refused a slot waits before its next
// delivery, d the delivery's count (Delivery.Attempt): 50ms, doubling with
// each delivery up to 1s, drawn from [d/2, d], so waiting tasks neither
// keep a full cap's broker busy nor start long after a slot came free.
func slotBackoff(delivery int) time.Duration {
	d := expDelay(50*time.Millisecond, time.Second, max(delivery, 1))
	return d/2 + rand.N(d-d/2+1)
}

// renewSlots renews dv's slots, if it holds any, for a Lease, at each
// extension of its lease while its task runs (delivery.Renewed). A slot
// that lapsed meanwhile (its renewal came a Lease late: an outage) is
// reported once: the task runs on, and its limit may be exceeded by one
// until it returns.
func (dv *delivery) renewSlots(ctx context.Context) {
	hs, w := dv.slots.lock(), dv.w
	if hs == nil {
		return
	}
	defer hs.mu.Unlock()
	err := portable.UseErr(ctx, w.srv.broker, "concurrency limits", func(cl driver.ConcurrencyLimiter) error {
		return cl.Renew(ctx, hs.holder, hs.keys, w.cfg.Lease)
	})
	switch {
	case err == nil:
		hs.failing = false
	case errors.Is(err, driver.ErrLeaseLost):
		if !hs.lost {
			hs.lost = true
			w.report(fmt.Errorf("errand: task %s (%s): a concurrency slot lapsed while it ran; it runs on, and its limit may be exceeded until it returns: %w", dv.sig.Name, dv.sig.UUID, err), "errand: concurrency slot lost", dv.attrs()...)
		}
	case !hs.failing:
		hs.failing = true
		w.report(fmt.Errorf("errand: task %s (%s): renew its concurrency slots: %w", dv.sig.Name, dv.sig.UUID, err), "errand: concurrency slots not renewed; retried at the next extension", dv.attrs()...)
	}
}

// freeSlots gives dv's slots back, once its function returned (or its
// attempt did not run after all); calling it again does nothing. A failed
// Free is reported: the slots lapse a Lease after their last renewal.
func (dv *delivery) freeSlots() {
	hs, w := dv.slots.lock(), dv.w
	if hs == nil {
		return
	}
	defer hs.mu.Unlock()
	hs.freed = true
	ctx, cancel := w.call()
	defer cancel()
	err := portable.UseErr(ctx, w.srv.broker, "concurrency limits", func(cl driver.ConcurrencyLimiter) error {
		return cl.Free(ctx, hs.holder, hs.keys)
	})
	if err != nil {
		w.report(fmt.Errorf("errand: task %s (%s): free its concurrency slots (they lapse after the worker's Lease): %w", dv.sig.Name, dv.sig.UUID, err), "errand: free concurrency slots", dv.attrs()...)
	}
}

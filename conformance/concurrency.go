package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Concurrency limits: the broker's slots under leases
// (driver.ConcurrencyLimiter), checked on the driver, and errand's
// fleet-wide caps (WithConcurrencyLimit) end to end. Each case logs and
// checks nothing else when the harness does not declare Concurrency.

func (c *bcase) limiter() driver.ConcurrencyLimiter {
	c.t.Helper()
	cl, ok := c.drv.(driver.ConcurrencyLimiter)
	if !ok {
		c.t.Fatalf("harness declares Concurrency but %T is not a driver.ConcurrencyLimiter", c.drv)
	}
	return cl
}

// slotCase is a broker case on the driver's slots: its limiter, and
// helpers that fail the case on an error.
type slotCase struct {
	*bcase
	cl driver.ConcurrencyLimiter
}

func newSlotCase(t testing.TB, h BrokerHarness) (*slotCase, bool) {
	if !h.Caps.Concurrency {
		t.Logf("broker does not declare Concurrency; errand refuses WithConcurrencyLimit on it")
		return nil, false
	}
	c := newBCase(t, h)
	return &slotCase{bcase: c, cl: c.limiter()}, true
}

func (c *slotCase) holder(what string) string { return runID + "-" + what }

func (c *slotCase) acquire(holder string, ttl time.Duration, slots ...driver.Slot) bool {
	c.t.Helper()
	ok, err := c.cl.Acquire(c.ctx, holder, slots, ttl)
	if err != nil {
		c.t.Fatalf("Acquire(%s, %v, %v): %v", holder, slots, ttl, err)
	}
	return ok
}

// mustAcquire takes slots of free keys for holder, the case's setup:
// a refusal fails the case.
func (c *slotCase) mustAcquire(holder string, ttl time.Duration, slots ...driver.Slot) {
	c.t.Helper()
	if !c.acquire(holder, ttl, slots...) {
		c.t.Fatalf("Acquire(%s, %v, %v) of free keys was refused", holder, slots, ttl)
	}
}

func (c *slotCase) free(holder string, keys ...string) {
	c.t.Helper()
	if err := c.cl.Free(c.ctx, holder, keys); err != nil {
		c.t.Fatalf("Free(%s, %v): %v", holder, keys, err)
	}
}

// waitAcquire tries Acquire until it succeeds or within passes, and
// reports whether it did and when.
func (c *slotCase) waitAcquire(holder string, ttl, within time.Duration, slots ...driver.Slot) (bool, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if c.acquire(holder, ttl, slots...) {
			return true, time.Now()
		}
		if time.Now().After(deadline) {
			return false, time.Time{}
		}
		if err := sleepUntil(c.ctx, time.Now().Add(5*time.Millisecond)); err != nil { // polling the server's clock
			c.t.Fatal(err)
		}
	}
}

// slotsLimit: of many holders racing for a key's free slots, exactly its
// limit take one; a holder that holds one keeps it when it asks again
// (the key full); once one is freed, exactly one of the racing others
// takes it.
func slotsLimit(t testing.TB, h BrokerHarness) {
	c, ok := newSlotCase(t, h)
	if !ok {
		return
	}
	const promise = "concurrency limit (never more holders than the limit, whatever the race)"
	key := name(t, "slots")
	const limit, n = 3, 24
	race := func(holders []string) []string {
		oks := make([]bool, len(holders))
		errs := make([]error, len(holders))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, hd := range holders {
			wg.Go(func() {
				<-start
				oks[i], errs[i] = c.cl.Acquire(c.ctx, hd, []driver.Slot{{Key: key, Limit: limit}}, time.Minute)
			})
		}
		close(start)
		wg.Wait()
		var won []string
		for i, hd := range holders {
			if errs[i] != nil {
				t.Fatalf("Acquire by %s: %v", hd, errs[i])
			}
			if oks[i] {
				won = append(won, hd)
			}
		}
		return won
	}
	holders := make([]string, n)
	for i := range holders {
		holders[i] = c.holder(fmt.Sprintf("holder-%02d", i))
	}
	won := race(holders)
	if len(won) != limit {
		t.Fatalf("%s promise broken: %d holders raced for a free key of limit %d and %d took a slot (%v); want exactly %d", promise, n, limit, len(won), won, limit)
	}
	if !c.acquire(won[0], time.Minute, driver.Slot{Key: key, Limit: limit}) {
		t.Errorf("%s promise broken: %s, holding a slot of a full key, asked again and was refused; a holder keeps its slot", promise, won[0])
	}
	c.free(won[0], key)
	var others []string
	for _, hd := range holders {
		if hd != won[1] && hd != won[2] {
			others = append(others, hd)
		}
	}
	if again := race(others); len(again) != 1 {
		t.Fatalf("%s promise broken: one slot of %d was freed, %d holders raced for it and %d took it (%v); want exactly 1", promise, limit, len(others), len(again), again)
	}
}

// slotsLapse: a holder that renews keeps its slot beyond its ttl; one
// that stops renewing loses it once ttl has passed (a killed worker's
// slots come back), never before.
func slotsLapse(t testing.TB, h BrokerHarness) {
	c, ok := newSlotCase(t, h)
	if !ok {
		return
	}
	const promise = "concurrency slot lease (a slot lapses ttl after its holder's last renewal, not before)"
	key := name(t, "slot")
	slot := driver.Slot{Key: key, Limit: 1}
	ttl := c.tm.Lease
	a, b := c.holder("renewing"), c.holder("waiting")
	c.mustAcquire(a, ttl, slot)
	// Renewed every ttl/4 for 3×ttl: the slot stays a's.
	until := time.Now().Add(3 * ttl)
	var last time.Time // when a's last Renew was sent
	for time.Now().Before(until) {
		if err := sleepUntil(c.ctx, time.Now().Add(ttl/4)); err != nil {
			t.Fatal(err)
		}
		last = time.Now()
		if err := c.cl.Renew(c.ctx, a, []string{key}, ttl); err != nil {
			t.Fatalf("%s promise broken: renewing a held slot every ttl/4 (ttl %v) failed: %v", promise, ttl, err)
		}
		if c.acquire(b, ttl, slot) {
			t.Fatalf("%s promise broken: another holder took the slot of a full key of limit 1 while its holder renewed it every ttl/4 (ttl %v)", promise, ttl)
		}
	}
	// a stops renewing (as a killed worker would): b gets the slot once
	// ttl has passed since a's last renewal, not before.
	got, at := c.waitAcquire(b, ttl, 10*ttl+c.tm.Prompt, slot)
	if !got {
		t.Fatalf("%s promise broken: a slot whose holder stopped renewing was still held %v later (ttl %v): a killed worker's slots never come back", promise, 10*ttl+c.tm.Prompt, ttl)
	}
	if early := at.Sub(last); early < ttl*9/10 { // a tenth for the clocks of the two machines
		t.Errorf("%s promise broken: another holder took the slot %v after its holder's last renewal, before its ttl %v", promise, early.Round(time.Millisecond), ttl)
	}
}

// slotsFree: Free gives a slot back at once (no waiting for its ttl); freeing
// a slot not held is no error.
func slotsFree(t testing.TB, h BrokerHarness) {
	c, ok := newSlotCase(t, h)
	if !ok {
		return
	}
	const promise = "concurrency slot Free (a freed slot is free at once)"
	key := name(t, "slot")
	slot := driver.Slot{Key: key, Limit: 1}
	a, b := c.holder("first"), c.holder("second")
	c.mustAcquire(a, time.Minute, slot)
	if c.acquire(b, time.Minute, slot) {
		t.Fatalf("concurrency limit promise broken: a second holder took a slot of a key of limit 1")
	}
	c.free(a, key)
	if !c.acquire(b, time.Minute, slot) {
		t.Fatalf("%s promise broken: %s freed its slot, and another holder was refused it at once (its ttl was a minute)", promise, a)
	}
	if err := c.cl.Free(c.ctx, a, []string{key, name(t, "never-taken")}); err != nil {
		t.Errorf("%s promise broken: freeing slots not held (freed already, never taken) answered %v, want nil", promise, err)
	}
	if c.acquire(a, time.Minute, slot) {
		t.Errorf("%s promise broken: %s freed a slot it no longer held, and that freed %s's", promise, a, b)
	}
}

// slotsAllOrNone: Acquire of two keys, one of them full, takes neither;
// of two free ones, both.
func slotsAllOrNone(t testing.TB, h BrokerHarness) {
	c, ok := newSlotCase(t, h)
	if !ok {
		return
	}
	const promise = "concurrency Acquire (all or none of its keys)"
	x, y := driver.Slot{Key: name(t, "x"), Limit: 1}, driver.Slot{Key: name(t, "y"), Limit: 1}
	c.mustAcquire(c.holder("holds-y"), time.Minute, y)
	for _, order := range [][]driver.Slot{{x, y}, {y, x}} {
		if c.acquire(c.holder("both"), time.Minute, order...) {
			t.Fatalf("%s promise broken: Acquire of %s (free) and %s (full) took them", promise, x.Key, y.Key)
		}
	}
	if !c.acquire(c.holder("x-alone"), time.Minute, x) {
		t.Fatalf("%s promise broken: an Acquire refused for one full key kept the slot of the free one: %s is taken", promise, x.Key)
	}
	z, w := driver.Slot{Key: name(t, "z"), Limit: 2}, driver.Slot{Key: name(t, "w"), Limit: 2}
	if !c.acquire(c.holder("zw"), time.Minute, z, w) {
		t.Fatalf("%s promise broken: Acquire of two free keys was refused", promise)
	}
	// Each now has one holder of two: one more fits in each, not two.
	if !c.acquire(c.holder("z"), time.Minute, z) || !c.acquire(c.holder("w"), time.Minute, w) {
		t.Fatalf("%s promise broken: after one Acquire of two keys of limit 2, a second holder was refused a slot of one of them", promise)
	}
	if c.acquire(c.holder("z-third"), time.Minute, z) || c.acquire(c.holder("w-third"), time.Minute, w) {
		t.Fatalf("%s promise broken: after one Acquire of two keys of limit 2 and one more holder of each, a third holder took a slot: the two-key Acquire took no slot of one", promise)
	}
}

// slotsRenewLapsed: renewing a slot that lapsed (and that another holder
// took since) answers ErrLeaseLost and takes nothing back, while the
// holder's other slots are renewed; renewing a slot never held answers
// ErrLeaseLost.
func slotsRenewLapsed(t testing.TB, h BrokerHarness) {
	c, ok := newSlotCase(t, h)
	if !ok {
		return
	}
	const promise = "concurrency Renew (a lapsed slot is lost, never taken back)"
	short, long := driver.Slot{Key: name(t, "short"), Limit: 1}, driver.Slot{Key: name(t, "long"), Limit: 1}
	ttl := c.tm.Lease
	a, b := c.holder("lapsing"), c.holder("taker")
	c.mustAcquire(a, ttl, short)
	c.mustAcquire(a, time.Minute, long)
	if got, _ := c.waitAcquire(b, time.Minute, 10*ttl+c.tm.Prompt, short); !got {
		t.Fatalf("concurrency slot lease promise broken: a slot of ttl %v not renewed was still held %v later", ttl, 10*ttl+c.tm.Prompt)
	}
	err := c.cl.Renew(c.ctx, a, []string{short.Key, long.Key}, time.Minute)
	if !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("%s promise broken: renewing a slot that lapsed and was taken by another holder answered %v, want an error wrapping driver.ErrLeaseLost", promise, err)
	}
	if c.acquire(c.holder("third"), time.Minute, short) {
		t.Errorf("%s promise broken: after the lapsed holder's Renew, a third holder took a slot of the key of limit 1 its taker holds", promise)
	}
	c.free(b, short.Key)
	if !c.acquire(c.holder("fourth"), time.Minute, short) {
		t.Errorf("%s promise broken: the lapsed holder's Renew took its slot back: once its taker freed it, the key was still full", promise)
	}
	if c.acquire(b, time.Minute, long) {
		t.Errorf("%s promise broken: the holder's other slot, renewed in the same call, was taken by another holder", promise)
	}
	if err := c.cl.Renew(c.ctx, c.holder("stranger"), []string{long.Key}, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("%s promise broken: renewing a slot never held answered %v, want an error wrapping driver.ErrLeaseLost", promise, err)
	}
}

// ---- end to end ----

// concurrencyLimit: two workers on one queue, a task registered with
// WithConcurrencyLimit(2): never more than 2 of its attempts run at once
// across both, though each runs longer than the slot's lease (renewed
// with the delivery's); every task completes at its first attempt,
// recording nothing while it waited.
func concurrencyLimit(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	if !c.caps.Concurrency {
		err := c.srv.Register("capped", func() error { return nil }, errand.WithConcurrencyLimit(2))
		if !isUnsupported(err) {
			t.Errorf("Register with WithConcurrencyLimit on a broker without concurrency limits returned %v, want an error satisfying errors.Is(err, errors.ErrUnsupported) (never silently unlimited)", err)
		}
		w := c.srv.NewWorker(errand.WorkerConfig{QueueConcurrencyLimit: map[string]int{c.queue: 2}})
		if !isUnsupported(w.Err()) {
			t.Errorf("NewWorker with QueueConcurrencyLimit on a broker without concurrency limits has Err %v, want an error satisfying errors.Is(err, errors.ErrUnsupported)", w.Err())
		}
		t.Logf("broker does not declare Concurrency")
		return
	}
	const promise = "concurrency limit (never more running at once than WithConcurrencyLimit, across workers)"
	const limit, n = 2, 4
	// A lease of four of the kit's short leases, and at least 1s,
	// renewed every third of it: a renewal (of the lease, and with it of
	// the slot) late by more than two thirds of it lets the slot lapse
	// or loses the lease, and another attempt then rightly takes the
	// slot (a loaded machine made 200ms and 270ms of slack too little).
	lease := max(4*c.tm.Lease, time.Second)
	hold := lease + lease/4 // each attempt outlives its slot's lease: only renewals keep it
	var running, most atomic.Int32
	var mu sync.Mutex
	attempts := map[string]int{}
	c.register("capped", func(ctx context.Context) error {
		now := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		info, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		attempts[info.UUID] = info.Attempt
		mu.Unlock()
		return sleepUntil(ctx, time.Now().Add(hold)) // the task's work
	}, errand.WithConcurrencyLimit(limit))
	for range 2 {
		c.start(errand.WorkerConfig{Concurrency: 4, Lease: lease})
	}
	var rs []*errand.AsyncResult
	for range n {
		rs = append(rs, c.send(errand.NewSignature("capped")))
	}
	for i, r := range rs {
		if _, err := r.Get(c.ctx); err != nil {
			t.Fatalf("%s promise broken: task %d of %d ended with %v, want success", promise, i+1, n, err)
		}
		c.pathIs(r.Signature.UUID, errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateSuccess)
	}
	if m := most.Load(); m > limit {
		t.Errorf("%s promise broken: %d attempts ran at once on two workers (each %v, lease %v); the limit is %d", promise, m, hold, lease, limit)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if a != 1 {
			t.Errorf("%s promise broken: task %s ran as attempt %d; waiting for a slot counts no attempt", promise, id, a)
		}
	}
	t.Logf("%d tasks of %v, limit %d, two workers of 4: at most %d at once", n, hold, limit, most.Load())
}

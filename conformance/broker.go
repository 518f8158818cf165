package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/bridge"
)

// RunBroker runs every broker case against h, as subtests named
// Broker/<Case>/<Subcase> (select with -run and -skip).
func RunBroker(t *testing.T, h BrokerHarness) {
	h.Timing = h.Timing.withDefaults()
	t.Run("Broker", func(t *testing.T) { runCases(t, h, h.Timing, h.Serial, brokerCases) })
}

// brokerCases are the broker promises, by stable name; true marks a case
// that runs alone (see kase).
var brokerCases = []kase[BrokerHarness]{
	{"Capabilities", brokerCapabilities, parallel},
	{"PublishFetchAck", publishFetchAck, parallel},
	{"BatchPublish", batchPublish, parallel},
	{"Release/Immediate", releaseImmediate, parallel},
	{"Release/NotBefore", releaseNotBefore, parallel},
	{"Redelivery/LeaseExpired", redeliveryLeaseExpired, parallel},
	{"Lease/ExtendKeepsAway", leaseExtend, alone},
	{"Lease/ConcurrentConsumers", concurrentConsumers, parallel},
	{"Delay/NeverEarly", delayNeverEarly, alone},
	{"Delay/OrderByETA", delayOrder, alone},
	{"Delay/BeyondMax", delayBeyondMax, parallel},
	{"Ctx/FetchCancel", fetchCancel, alone},
	{"Close/WakesFetch", closeWakesFetch, alone},
	{"Payload/Limit", payloadLimit, parallel},
	{"Ack/PerItem", ackPerItem, parallel},
	{"Ack/Concurrent", ackConcurrent, parallel},
	{"BadMessage/SetAside", badMessageSetAside, parallel},
	{"Stats/Counts", statsCounts, parallel},
	{"Purge", purge, parallel},
	{"Archive/KeepsEntry", archiveKeepsEntry, parallel},
	{"Archive/Retention", archiveRetention, parallel},
	{"Archive/Requeue", archiveRequeue, parallel},
	{"Archive/Delete", archiveDelete, parallel},
	{"Archive/LeaseLost", archiveLeaseLost, parallel},
	{"Archive/PageBounds", pageBounds, parallel},
	{"List/ByState", listByState, parallel},
	{"List/Find", listFind, parallel},
	{"Queues/Lists", queuesList, parallel},
	{"Queues/Known", queuesKnown, parallel},
	{"Pause/Flag", pauseFlag, parallel},
	{"Heartbeat/TTL", heartbeatTTL, parallel},
	{"Unique/Lock", uniqueLock, parallel},
	{"Unique/Concurrent", uniqueConcurrent, parallel},
	{"RateLimit/Bucket", rateBucket, alone},
	{"Priority/Order", priorityOrder, parallel},
	{"Schedule/Store", scheduleStoreCase, parallel},
	{"Schedule/ClaimOnce", scheduleClaimOnce, parallel},
	{"Schedule/DeleteForgetsClaims", scheduleDeleteForgetsClaims, parallel},
	{"CancelNotify", cancelNotify, parallel},
}

type bcase struct {
	t   testing.TB
	h   BrokerHarness
	tm  Timing
	drv errand.Broker // the driver as the harness made it
	b   errand.Broker // the same driver in errand's portable layer, as a Server uses it
	q   string
	ctx context.Context
}

// newBCase makes the case's broker. Cases call it through errand's
// portable layer (what every user of errand gets: payload, closed and
// batch-convention checks), and the driver directly where a promise is
// the driver's alone.
func newBCase(t testing.TB, h BrokerHarness) *bcase {
	drv := h.New(t)
	return &bcase{t: t, h: h, tm: h.Timing, drv: drv, b: portable(t, drv), q: name(t, "q"), ctx: caseCtx(t, h.Timing)}
}

// portable returns drv wrapped in errand's portable layer, as a Server
// built on it uses it.
func portable(t testing.TB, drv errand.Broker) errand.Broker {
	srv, err := errand.NewServer(errand.Config{Broker: drv, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { srv.Backend().Close() })
	return bridge.PortableBroker(srv)
}

func (c *bcase) msg(id string, notBefore time.Time) errand.Message {
	id = runID + "-" + id
	return errand.Message{ID: id, Queue: c.q, Body: []byte(`{"conformance":"` + id + `"}`), NotBefore: notBefore}
}

func (c *bcase) publish(ms ...errand.Message) {
	c.t.Helper()
	if err := c.b.Publish(c.ctx, ms...); err != nil {
		c.t.Fatalf("Publish(%d messages): %v", len(ms), err)
	}
}

// fetch waits up to within for one fetch; it returns nothing (not an error)
// when nothing arrived in time.
func (c *bcase) fetch(limit int, lease, within time.Duration) []*driver.Delivery {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, within)
	defer cancel()
	ds, err := c.b.Fetch(ctx, c.q, limit, lease)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		c.t.Fatalf("Fetch: %v", err)
	}
	return ds
}

// fetchN fetches until n deliveries arrived or within passed.
func (c *bcase) fetchN(n int, lease, within time.Duration) []*driver.Delivery {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var out []*driver.Delivery
	for len(out) < n && time.Now().Before(deadline) {
		out = append(out, c.fetch(n-len(out), lease, time.Until(deadline))...)
	}
	return out
}

func (c *bcase) ack(d *driver.Delivery) {
	c.t.Helper()
	if err := ackOne(c.ctx, c.b, d); err != nil {
		c.t.Fatalf("Ack(%s): %v", d.ID, err)
	}
}

func ids(ds []*driver.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = strings.TrimPrefix(d.ID, runID+"-")
	}
	return out
}

func brokerCapabilities(t testing.TB, h BrokerHarness) {
	b := h.New(t)
	caps := h.Caps
	var lim driver.Limits
	if l, ok := b.(driver.Limiter); ok {
		lim = l.Limits()
	}
	if lim.MaxPayload != caps.MaxPayload || lim.MaxDelay != caps.MaxDelay {
		t.Errorf("capabilities promise broken: harness declares MaxPayload %d, MaxDelay %v; broker Limits() reports %d, %v",
			caps.MaxPayload, caps.MaxDelay, lim.MaxPayload, lim.MaxDelay)
	}
	checkCapability(t, b, caps.Purge, reflect.TypeFor[driver.Purger](), "Purge")
	checkCapability(t, b, caps.Stats, reflect.TypeFor[driver.StatsReporter](), "Stats")
	checkCapability(t, b, caps.Archive, reflect.TypeFor[driver.Archiver](), "Archive")
	checkCapability(t, b, caps.List, reflect.TypeFor[driver.Lister](), "List")
	checkCapability(t, b, caps.Queues, reflect.TypeFor[driver.QueueLister](), "Queues")
	checkCapability(t, b, caps.Pause, reflect.TypeFor[driver.Pauser](), "Pause")
	checkCapability(t, b, caps.Heartbeat, reflect.TypeFor[driver.Heartbeater](), "Heartbeat")
	checkCapability(t, b, caps.Find, reflect.TypeFor[driver.Finder](), "Find")
	checkCapability(t, b, caps.Unique, reflect.TypeFor[driver.Uniquer](), "Unique")
	checkCapability(t, b, caps.RateLimit, reflect.TypeFor[driver.RateLimiter](), "RateLimit")
	checkCapability(t, b, caps.Schedules, reflect.TypeFor[driver.ScheduleStore](), "Schedules")
	checkCapability(t, b, caps.Colocate, reflect.TypeFor[driver.Colocator](), "Colocate")
	checkCapability(t, b, caps.Tx, reflect.TypeFor[driver.Transactor](), "Tx")
	checkCapability(t, b, caps.CancelNotify, reflect.TypeFor[driver.CancelNotifier](), "CancelNotify")
	if caps.Tx && h.BeginTx == nil {
		t.Errorf("capabilities promise broken: harness declares Tx but has no BeginTx: the Worker/Tx cases cannot open a transaction")
	}
}

func publishFetchAck(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	m := c.msg("one", time.Time{})
	c.publish(m)
	ds := c.fetchN(1, c.tm.Lease, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("delivery promise broken: published 1 message, fetched %d within %v (%s)", len(ds), c.tm.Prompt*5, c.tm)
	}
	d := ds[0]
	if d.ID != m.ID || string(d.Body) != string(m.Body) || d.Queue != c.q {
		t.Fatalf("delivery promise broken: fetched {ID %q, Queue %q, Body %q}, published {%q, %q, %q}", d.ID, d.Queue, d.Body, m.ID, c.q, m.Body)
	}
	// errand tells a redelivery (Attempt >= 2) from a second message that
	// reuses a running task's UUID (Attempt 1), and bounds unknown task
	// names by it: every broker counts deliveries.
	if d.Attempt != 1 {
		t.Errorf("delivery count promise broken: the first delivery of a message has Attempt %d, want 1", d.Attempt)
	}
	c.ack(d)
	// Well past the lease it was fetched with, it must not come back.
	if again := c.fetch(1, time.Minute, c.tm.Lease*3); len(again) != 0 {
		t.Fatalf("ack promise broken: an acked message was delivered again after its %v lease: %v", c.tm.Lease, ids(again))
	}
}

func batchPublish(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	const n = 25
	var ms []errand.Message
	for i := range n {
		ms = append(ms, c.msg(fmt.Sprintf("m%02d", i), time.Time{}))
	}
	c.publish(ms...)
	ds := c.fetchN(n, time.Minute, c.tm.Prompt*10)
	got := ids(ds)
	slices.Sort(got)
	if len(slices.Compact(got)) != n {
		t.Fatalf("batch publish promise broken: published %d distinct messages in one call, fetched %d: %v", n, len(ds), ids(ds))
	}
	for _, d := range ds {
		c.ack(d)
	}
}

func releaseImmediate(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	c.publish(c.msg("r", time.Time{}))
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("fetched %d, want 1", len(ds))
	}
	if err := c.b.Release(c.ctx, ds[0], time.Time{}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	again := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(again) != 1 || again[0].ID != ds[0].ID {
		t.Fatalf("release promise broken: a released message was not delivered again within %v (got %v)", c.tm.Prompt*5, ids(again))
	}
	if again[0].Attempt <= ds[0].Attempt {
		t.Errorf("delivery count promise broken: a released message came back with Attempt %d after Attempt %d; a release must not reset the count (errand bounds unknown task names by it)", again[0].Attempt, ds[0].Attempt)
	}
	c.ack(again[0])
}

func releaseNotBefore(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	c.publish(c.msg("nb", time.Time{}))
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("fetched %d, want 1", len(ds))
	}
	notBefore := time.Now().Add(c.tm.Delay)
	if err := c.b.Release(c.ctx, ds[0], notBefore); err != nil {
		t.Fatalf("Release: %v", err)
	}
	again := c.fetchN(1, time.Minute, c.tm.Delay+c.tm.DelayBound+c.tm.Prompt)
	at := time.Now()
	if len(again) != 1 {
		t.Fatalf("release promise broken: a message released with a not-before time %v ahead never came back (%s)", c.tm.Delay, c.tm)
	}
	if at.Before(notBefore) {
		t.Fatalf("release promise broken: message released until %v came back %v early (%s)", notBefore.Format(time.StampMilli), notBefore.Sub(at), c.tm)
	}
	c.ack(again[0])
}

func redeliveryLeaseExpired(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	const n = 5
	for i := range n {
		c.publish(c.msg(fmt.Sprintf("crash%d", i), time.Time{}))
	}
	// A consumer takes everything and "crashes": never settles, never extends.
	first := c.fetchN(n, c.tm.Lease, c.tm.Prompt*5)
	if len(first) != n {
		t.Fatalf("fetched %d of %d before the crash", len(first), n)
	}
	taken := time.Now()
	again := c.fetchN(n, time.Minute, c.tm.Lease*3+c.tm.Prompt*5)
	if len(again) != n {
		t.Fatalf("at-least-once promise broken: a consumer took %d messages with a %v lease and crashed; %d came back (%v) (%s)",
			n, c.tm.Lease, len(again), ids(again), c.tm)
	}
	if early := time.Since(taken); early < c.tm.Lease*9/10 {
		t.Fatalf("lease promise broken: messages came back %v after being leased for %v", early, c.tm.Lease)
	}
	for _, d := range again {
		if d.Attempt == 1 {
			t.Errorf("redelivered %s reports Attempt 1; want > 1 (or 0 where the broker does not count)", d.ID)
		}
		c.ack(d)
	}
	err := ackOne(c.ctx, c.b, first[0])
	switch {
	case !h.Caps.DetectsLostLease:
		t.Logf("broker declares it cannot detect a lost lease; the crashed consumer's late Ack returned %v", err)
	case err == nil:
		t.Errorf("lease promise broken: the crashed consumer's late Ack succeeded although another consumer holds the message; want driver.ErrLeaseLost")
	case !errors.Is(err, driver.ErrLeaseLost):
		t.Errorf("late Ack error %v does not satisfy errors.Is(err, driver.ErrLeaseLost)", err)
	}
}

func leaseExtend(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	c.publish(c.msg("ext", time.Time{}))
	ds := c.fetchN(1, c.tm.Lease, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("fetched %d, want 1", len(ds))
	}
	// Extend a few times over three leases; meanwhile nobody else may get it.
	until := time.Now().Add(c.tm.Lease * 3)
	for time.Now().Before(until) {
		if err := c.b.Extend(c.ctx, ds[0], c.tm.Lease); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		if other := c.fetch(1, time.Minute, c.tm.Lease/3); len(other) != 0 {
			t.Fatalf("lease promise broken: a delivery extended every %v reached another consumer (%s)", c.tm.Lease/3, c.tm)
		}
	}
	c.ack(ds[0])
}

func concurrentConsumers(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	const n, consumers = 40, 4
	var ms []errand.Message
	for i := range n {
		ms = append(ms, c.msg(fmt.Sprintf("c%02d", i), time.Time{}))
	}
	c.publish(ms...)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt*20)
	defer cancel()
	for range consumers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := c.b.Fetch(ctx, c.q, 3, time.Minute)
				if err != nil {
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				done := len(seen) == n
				mu.Unlock()
				if done {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("delivery promise broken: %d consumers fetched %d distinct messages of %d", consumers, len(seen), n)
	}
	for id, k := range seen {
		if k > 1 {
			t.Fatalf("lease promise broken: message %s reached consumers %d times within its lease", id, k)
		}
	}
}

func delayNeverEarly(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	due := time.Now().Add(c.tm.Delay)
	c.publish(c.msg("late", due))
	ds := c.fetchN(1, time.Minute, c.tm.Delay+c.tm.DelayBound+c.tm.Prompt*5)
	at := time.Now()
	if len(ds) != 1 {
		t.Fatalf("delay promise broken: a message delayed %v never arrived (%s)", c.tm.Delay, c.tm)
	}
	if at.Before(due) {
		t.Fatalf("delay promise broken: delivered %v before its ETA (%s)", due.Sub(at), c.tm)
	}
	if late := at.Sub(due); late > c.tm.DelayBound {
		t.Errorf("delay promise broken: delivered %v after its ETA, beyond the declared bound %v (%s)", late, c.tm.DelayBound, c.tm)
	}
	c.ack(ds[0])
}

func delayOrder(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	now := time.Now()
	step := c.tm.Delay / 3
	// Published out of order; due in order a, b, c.
	c.publish(c.msg("c", now.Add(3*step)), c.msg("a", now.Add(step)), c.msg("b", now.Add(2*step)))
	var got []string
	for len(got) < 3 {
		ds := c.fetch(1, time.Minute, c.tm.Delay+c.tm.DelayBound+c.tm.Prompt*5)
		if len(ds) == 0 {
			t.Fatalf("delay promise broken: only %v of 3 delayed messages arrived", got)
		}
		got = append(got, ids(ds)...)
		c.ack(ds[0])
	}
	if h.Caps.OrderedByETA && strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("ordering promise broken: due messages delivered as %v, want by ETA a,b,c (%s)", got, c.tm)
	}
	if !h.Caps.OrderedByETA {
		t.Logf("broker declares no ETA ordering; delivered as %v (all three arrived)", got)
	}
}

func delayBeyondMax(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	if h.Caps.MaxDelay == 0 {
		// No service maximum: a delay of ten times the usual one must hold.
		c.delayHolds(c.tm.Delay * 10)
		return
	}
	c.delayHolds(h.Caps.MaxDelay + h.Caps.MaxDelay/2)
}

func (c *bcase) delayHolds(d time.Duration) {
	c.t.Helper()
	due := time.Now().Add(d)
	c.publish(c.msg("far", due))
	ds := c.fetchN(1, time.Minute, d+c.tm.DelayBound+c.tm.Prompt*5)
	at := time.Now()
	if len(ds) != 1 {
		c.t.Fatalf("delay promise broken: a message delayed %v (beyond the declared maximum %v) never arrived", d, c.h.Caps.MaxDelay)
	}
	if at.Before(due) {
		c.t.Fatalf("delay promise broken: a message delayed %v (declared maximum %v) arrived %v early", d, c.h.Caps.MaxDelay, due.Sub(at))
	}
	c.ack(ds[0])
}

func fetchCancel(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	ctx, cancel := context.WithCancel(c.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.b.Fetch(ctx, c.q, 1, time.Minute)
		errc <- err
	}()
	// Let the fetch block on the empty queue (a real wait: time passing).
	sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/10))
	cancel()
	timer := time.NewTimer(c.tm.Prompt)
	defer timer.Stop()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("errors promise broken: a cancelled Fetch returned %v, want context.Canceled", err)
		}
	case <-timer.C:
		t.Fatalf("errors promise broken: Fetch did not return within %v of its ctx being cancelled (%s)", c.tm.Prompt, c.tm)
	}
}

func closeWakesFetch(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	blocked := make(chan error, 1)
	go func() {
		_, err := c.b.Fetch(c.ctx, c.q, 1, time.Minute)
		blocked <- err
	}()
	// Give the Fetch time to block in the driver (nothing is queued); a
	// blocked call has no event to wait on, so the passing of time is it.
	sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/5))
	if err := c.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	timer := time.NewTimer(c.tm.Prompt * 5)
	defer timer.Stop()
	select {
	case err := <-blocked:
		if !errors.Is(err, errand.ErrClosed) {
			t.Errorf("errors promise broken: a Fetch blocked during Close returned %v, want an error satisfying errors.Is(err, errand.ErrClosed)", err)
		}
	case <-timer.C:
		t.Fatalf("close promise broken: a Fetch blocked in the driver did not return within %v of Close; the driver's Close must wake blocked fetches", c.tm.Prompt*5)
	}
	if err := c.b.Publish(c.ctx, c.msg("x", time.Time{})); !errors.Is(err, errand.ErrClosed) {
		t.Errorf("errors promise broken: Publish after Close returned %v, want errand.ErrClosed", err)
	}
}

func payloadLimit(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	pad := func(id string, size int) errand.Message {
		m := c.msg(id, time.Time{})
		head := `{"pad":"`
		m.Body = []byte(head + strings.Repeat("x", max(size-len(head)-2, 0)) + `"}`)
		return m
	}
	if h.Caps.MaxPayload == 0 {
		big := pad("big", 1<<20)
		c.publish(big)
		ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
		if len(ds) != 1 || string(ds[0].Body) != string(big.Body) {
			t.Fatalf("payload promise broken: a broker declaring no payload limit did not carry a 1 MiB message intact")
		}
		c.ack(ds[0])
		return
	}
	// The driver carries what it declares: a body of exactly MaxPayload.
	full := pad("full", h.Caps.MaxPayload)
	if err := c.drv.Publish(c.ctx, full); err != nil {
		t.Fatalf("payload promise broken: publishing %d bytes to a broker declaring MaxPayload %d failed: %v", len(full.Body), h.Caps.MaxPayload, err)
	}
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 || string(ds[0].Body) != string(full.Body) {
		t.Fatalf("payload promise broken: a body of exactly MaxPayload (%d bytes) did not arrive intact", h.Caps.MaxPayload)
	}
	c.ack(ds[0])
	// errand refuses one byte more, before anything of the batch is sent.
	small := c.msg("small", time.Time{})
	big := pad("big", h.Caps.MaxPayload+1)
	err := c.b.Publish(c.ctx, small, big)
	if !errors.Is(err, errand.ErrPayloadTooLarge) {
		t.Fatalf("payload promise broken: publishing %d bytes (limit %d) returned %v, want an error satisfying errors.Is(err, errand.ErrPayloadTooLarge)", len(big.Body), h.Caps.MaxPayload, err)
	}
	if ds := c.fetch(1, time.Minute, c.tm.Prompt); len(ds) != 0 {
		t.Fatalf("payload promise broken: a batch refused for an oversized message still delivered %v; nothing may be sent", ids(ds))
	}
}

// ackPerItem checks the batch convention of package driver on Ack,
// called on the driver directly: a batch is acked item by item, and the
// answer is nil or exactly one error per delivery, in order. In a batch
// holding one delivery whose lease was lost (another consumer holds its
// message now), that delivery alone fails, with ErrLeaseLost where the
// broker detects lost leases, and every other one is acked.
func ackPerItem(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	const n = 6
	promise := "batch convention"
	for i := range n {
		c.publish(c.msg(fmt.Sprintf("b%d", i), time.Time{}))
	}
	// One message leased briefly, the others for long; the brief lease
	// lapses and another consumer takes that one.
	lost := c.fetchN(1, c.tm.Lease, c.tm.Prompt*5)
	live := c.fetchN(n-1, time.Minute, c.tm.Prompt*5)
	if len(lost) != 1 || len(live) != n-1 {
		t.Fatalf("fetched %d and %d of %d", len(lost), len(live), n)
	}
	again := c.fetchN(1, time.Minute, c.tm.Lease*3+c.tm.Prompt*5)
	if len(again) != 1 || again[0].ID != lost[0].ID {
		t.Fatalf("at-least-once promise broken: %s, leased for %v, was not delivered again (got %v)", lost[0].ID, c.tm.Lease, ids(again))
	}
	// The stale delivery in the middle of the batch.
	ds := slices.Concat(live[:2], lost, live[2:])
	stale := 2
	errs, err := checkAnswer("Ack", len(ds), c.drv.Ack(c.ctx, ds))
	if err != nil {
		t.Fatalf("%s promise broken: %v", promise, err)
	}
	for i, err := range errs {
		switch {
		case i != stale && err != nil:
			t.Errorf("%s promise broken: Ack answered %v for delivery %d (%s), whose lease is live; one lost lease in a batch must fail that delivery alone", promise, err, i, ds[i].ID)
		case i == stale && h.Caps.DetectsLostLease && !errors.Is(err, driver.ErrLeaseLost):
			t.Errorf("%s promise broken: Ack answered %v for delivery %d (%s), whose lease was lost; want an error satisfying errors.Is(err, driver.ErrLeaseLost) for it", promise, err, i, ds[i].ID)
		}
	}
	// The live ones are gone for good; the lost one is the other
	// consumer's, which acks it (where a lost lease goes unnoticed, the
	// stale ack may have removed it already).
	if err := ackOne(c.ctx, c.b, again[0]); err != nil && h.Caps.DetectsLostLease {
		t.Fatalf("Ack(%s) by the consumer holding it: %v", again[0].ID, err)
	}
	if back := c.fetch(n, time.Minute, c.tm.Lease*3); len(back) != 0 {
		t.Fatalf("%s promise broken: %v came back after a batch Ack answered their acks (waited %v, lease %v)", promise, ids(back), c.tm.Lease*3, c.tm.Lease)
	}
	// A batch where every ack succeeds answers nil, or nil for each.
	for i := range 3 {
		c.publish(c.msg(fmt.Sprintf("ok%d", i), time.Time{}))
	}
	ok := c.fetchN(3, time.Minute, c.tm.Prompt*5)
	if len(ok) != 3 {
		t.Fatalf("fetched %d of 3", len(ok))
	}
	errs, err = checkAnswer("Ack", len(ok), c.drv.Ack(c.ctx, ok))
	if err != nil {
		t.Fatalf("%s promise broken: %v", promise, err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s promise broken: Ack of three live deliveries answered %v for delivery %d", promise, err, i)
		}
	}
}

// ackConcurrent acks many deliveries in concurrent batch calls through
// errand: none may come back.
func ackConcurrent(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	const n, per = 30, 3
	msgs := make([]errand.Message, n)
	for i := range msgs {
		msgs[i] = c.msg(fmt.Sprintf("c%d", i), time.Time{})
	}
	c.publish(msgs...)
	ds := c.fetchN(n, c.tm.Lease, c.tm.Prompt*5)
	if len(ds) != n {
		t.Fatalf("fetched %d of %d", len(ds), n)
	}
	var wg sync.WaitGroup
	errs := make([][]error, n/per)
	for i := range errs {
		wg.Go(func() { errs[i] = c.b.Ack(c.ctx, ds[i*per:(i+1)*per]) })
	}
	wg.Wait()
	for i, e := range errs {
		for j, err := range e {
			if err != nil {
				t.Errorf("ack promise broken: concurrent Ack of %s = %v", ds[i*per+j].ID, err)
			}
		}
	}
	if again := c.fetch(n, time.Minute, c.tm.Lease*3); len(again) != 0 {
		t.Fatalf("ack promise broken: %d of %d deliveries acked concurrently came back: %v", len(again), n, ids(again))
	}
}

func badMessageSetAside(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	bad := c.msg("garbage", time.Time{})
	bad.Body = []byte("not a signature {{{")
	c.publish(bad)
	ds := c.fetchN(1, c.tm.Lease, c.tm.Prompt*5)
	if len(ds) != 1 || string(ds[0].Body) != string(bad.Body) {
		t.Fatalf("bad input promise broken: a malformed body must be delivered as is (bytes are opaque to the broker); got %d deliveries", len(ds))
	}
	reason := "errand: malformed message: conformance " + runID
	if err := c.b.Reject(c.ctx, ds[0], reason); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	if again := c.fetch(1, time.Minute, c.tm.Lease*3); len(again) != 0 {
		t.Fatalf("bad input promise broken: a rejected message was delivered again after %v; it must be set aside for good", c.tm.Lease*3)
	}
	if !h.Caps.Archive {
		return
	}
	dl, err := setAsideOf(c.ctx, c.drv, c.q)
	switch {
	case err != nil:
		t.Fatalf("Archived: %v", err)
	case len(dl) != 1 || dl[0].ID != bad.ID || !strings.Contains(dl[0].Reason, reason):
		t.Fatalf("bad input promise broken: the archive holds %+v, want the rejected message with its reason (an Archiver keeps what Reject sets aside)", dl)
	}
}

// statsCounts checks a StatsReporter's counts of what a queue holds: a
// due and a delayed message, then one of them in flight. (A broker that
// cannot tell a delayed message from a due one, as SQS FIFO queues, may
// count both pending.)
func statsCounts(t testing.TB, h BrokerHarness) {
	if !h.Caps.Stats {
		t.Logf("broker does not declare Stats")
		return
	}
	c := newBCase(t, h)
	c.publish(c.msg("now", time.Time{}), c.msg("later", time.Now().Add(time.Hour)))
	st, err := statsOf(c.ctx, c.drv, c.q)
	if err != nil || st.Pending+st.Delayed != 2 || st.Delayed > 1 || st.InFlight != 0 {
		t.Fatalf("stats promise broken: Stats = %+v, %v; want 1 pending and 1 delayed (or 2 pending where delays are not told apart), none in flight", st, err)
	}
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("fetched %d, want 1", len(ds))
	}
	st, err = statsOf(c.ctx, c.drv, c.q)
	if err != nil || st.Pending+st.Delayed != 1 || st.InFlight != 1 {
		t.Fatalf("stats promise broken: Stats = %+v, %v; want 1 delayed (or pending) and 1 in flight", st, err)
	}
}

func purge(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	c.publish(c.msg("p1", time.Time{}), c.msg("p2", time.Time{}), c.msg("p3", time.Now().Add(time.Hour)))
	if !h.Caps.Purge {
		t.Logf("broker does not declare Purge")
		return
	}
	n, err := purgeOf(c.ctx, c.drv, c.q)
	if err != nil || n != 3 {
		t.Fatalf("purge promise broken: Purge = %d, %v; want 3", n, err)
	}
	if ds := c.fetch(1, time.Minute, c.tm.Prompt); len(ds) != 0 {
		t.Fatalf("purge promise broken: %v delivered after Purge", ids(ds))
	}
}

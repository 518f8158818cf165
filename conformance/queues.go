package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Several queues per worker (WorkerConfig.Queues, StrictPriority,
// QueueConcurrency) end to end, and priority within a queue
// (Message.Priority) on brokers that declare it.
//
// The weights, the strict order and the caps are errand's own dispatcher
// (queues.go in package errand); what they ask of a broker is that Fetch of
// a queue hands out that queue's messages and no other's. A broker that
// mixes its queues breaks all three cases (the self-test's
// "routes-every-queue-to-one").

// startLog records which queue each task started from, in order, and
// signals when the first n have started.
type startLog struct {
	mu    sync.Mutex
	tags  []string
	n     int
	ready chan struct{}
}

func newStartLog(n int) *startLog { return &startLog{n: n, ready: make(chan struct{})} }

func (l *startLog) add(tag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tags = append(l.tags, tag)
	if len(l.tags) == l.n {
		close(l.ready)
	}
}

func (l *startLog) first() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.tags[:min(l.n, len(l.tags))])
}

// wait blocks until n tasks started; it fails the case after within.
func (l *startLog) wait(c *wcase, within time.Duration, promise string) {
	c.t.Helper()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-l.ready:
	case <-t.C:
		l.mu.Lock()
		got := len(l.tags)
		l.mu.Unlock()
		c.t.Fatalf("%s promise broken: only %d of the first %d tasks started within %v", promise, got, l.n, within)
	case <-c.ctx.Done():
		c.t.Fatalf("%s promise broken: the case ended before %d tasks started", promise, l.n)
	}
}

// backlog sends n tasks of name to each queue, alternating queues, each
// task's one argument its queue's tag.
func (c *wcase) backlog(name string, n int, queues ...string) {
	c.t.Helper()
	for range n {
		for _, q := range queues {
			sig := errand.NewSignature(name, q)
			sig.RoutingKey = q
			c.send(sig)
		}
	}
}

func count(tags []string, tag string) int {
	n := 0
	for _, t := range tags {
		if t == tag {
			n++
		}
	}
	return n
}

// queuesWeighted: under a backlog on two queues weighted 3:1, the first
// 200 tasks a worker starts are within ±10 % of 3:1.
func queuesWeighted(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	const promise = "queue weights (under a backlog on every queue, tasks start in proportion to the queues' weights)"
	const n = 200
	hi, lo := c.queue+"-hi", c.queue+"-lo"
	log := newStartLog(n)
	c.register("tag", func(q string) error { log.add(q); return nil })
	c.backlog("tag", n, hi, lo)
	c.start(errand.WorkerConfig{Queues: map[string]int{hi: 3, lo: 1}, Concurrency: 2})
	log.wait(c, c.tm.Prompt*40, promise)
	first := log.first()
	h, l := count(first, hi), count(first, lo)
	if l == 0 || float64(h)/float64(l) < 2.7 || float64(h)/float64(l) > 3.3 {
		t.Errorf("%s promise broken: of the first %d tasks started, %d came from queue hi (weight 3) and %d from lo (weight 1): ratio %.2f, want 3 ± 10%%", promise, n, h, l, float64(h)/float64(max(l, 1)))
	}
}

// queuesStrict: under StrictPriority, a backlog on the higher queue runs
// entirely before any task of the lower one, though the lower was sent
// first.
func queuesStrict(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	const promise = "strict priority (a lower queue runs only while every higher one is empty)"
	const n = 30
	hi, lo := c.queue+"-hi", c.queue+"-lo"
	log := newStartLog(2 * n)
	c.register("tag", func(q string) error { log.add(q); return nil })
	c.backlog("tag", n, lo)
	c.backlog("tag", n, hi)
	c.start(errand.WorkerConfig{Queues: map[string]int{hi: 2, lo: 1}, StrictPriority: true, Concurrency: 1})
	log.wait(c, c.tm.Prompt*20, promise)
	first := log.first()
	// A lower queue may slip in while the higher one's fetch takes longer
	// than the dispatcher waits for it (a loaded machine): at most 2.
	if k := slices.Index(first, lo); count(first[:n], lo) > 2 {
		short := make([]string, len(first))
		for i, q := range first {
			short[i] = q[len(c.queue)+1:]
		}
		t.Errorf("%s promise broken: %d tasks of queue lo (weight 1) started before the %d tasks of hi (weight 2) had all started, the first %d-th; order: %v", promise, count(first[:n], lo), n, k+1, short)
	}
}

// queuesCap: a queue capped at 1 never has two tasks running at once,
// while another queue of the worker uses the other slots.
func queuesCap(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	const promise = "per-queue concurrency (QueueConcurrency caps a queue's running tasks; the other queues use the rest)"
	const n = 10
	capped, free := c.queue+"-capped", c.queue+"-free"
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	hold := c.tm.Prompt / 25
	c.register("tag", func(ctx context.Context, q string) error {
		mu.Lock()
		running[q]++
		peak[q] = max(peak[q], running[q])
		mu.Unlock()
		sleepUntil(ctx, time.Now().Add(hold))
		mu.Lock()
		running[q]--
		mu.Unlock()
		return nil
	})
	var rs []*errand.AsyncResult
	for range n {
		for _, q := range []string{capped, free} {
			sig := errand.NewSignature("tag", q)
			sig.RoutingKey = q
			rs = append(rs, c.send(sig))
		}
	}
	var reported atomic.Int32
	c.start(errand.WorkerConfig{Queues: map[string]int{capped: 1, free: 1}, QueueConcurrency: map[string]int{capped: 1}, Concurrency: 3,
		ErrorHandler: func(error) { reported.Add(1) }})
	for _, r := range rs {
		if _, err := r.Get(c.ctx); err != nil {
			t.Fatalf("%s: a task ended %v", promise, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if peak[capped] > 1 {
		t.Errorf("%s promise broken: %d tasks of the capped queue ran at once, over its QueueConcurrency of 1", promise, peak[capped])
	}
	if peak[free] < 2 {
		t.Errorf("%s promise broken: at most %d task of the uncapped queue ran at once with Concurrency 3 and the other queue capped at 1; want 2", promise, peak[free])
	}
	if n := reported.Load(); n > 0 {
		t.Errorf("%s: the worker reported %d errors on a healthy run", promise, n)
	}
}

// priorityOrder: due messages of one queue are delivered highest
// Message.Priority first, in publish order within a priority, and a
// delivery carries its priority; a released message keeps it.
func priorityOrder(t testing.TB, h BrokerHarness) {
	c := newBCase(t, h)
	if !h.Caps.Priority {
		t.Logf("broker does not declare Priority: Message.Priority is carried, not ordered by")
		return
	}
	const promise = "priority (due messages are delivered highest Message.Priority first, in publish order within one priority)"
	prios := []uint8{0, 9, 3, 0, 9, 255, 3, 1, 0, 9}
	var ms []errand.Message
	for i, p := range prios {
		m := c.msg(fmt.Sprintf("m%02d-p%d", i, p), time.Time{})
		m.Priority = p
		ms = append(ms, m)
	}
	c.publish(ms[:5]...)
	for _, m := range ms[5:] {
		c.publish(m) // batches and single publishes alike
	}
	want := slices.Clone(ms)
	slices.SortStableFunc(want, func(a, b errand.Message) int { return int(b.Priority) - int(a.Priority) })
	// One at a time, and the first two given back: they go ahead of the
	// lower priorities again.
	first := c.fetchN(2, time.Minute, c.tm.Prompt*5)
	for _, d := range first {
		if err := c.b.Release(c.ctx, d, time.Time{}); err != nil {
			t.Fatalf("Release(%s): %v", d.ID, err)
		}
	}
	var got []*driver.Delivery
	deadline := time.Now().Add(c.tm.Prompt * 10)
	for len(got) < len(ms) && time.Now().Before(deadline) {
		got = append(got, c.fetch(1, time.Minute, time.Until(deadline))...)
	}
	order := func(ds []*driver.Delivery) []string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = fmt.Sprintf("%s(%d)", ids(ds[i : i+1])[0], d.Priority)
		}
		return out
	}
	if len(got) != len(ms) {
		t.Fatalf("delivery promise broken: published %d messages, fetched %d: %v", len(ms), len(got), order(got))
	}
	for i, d := range got {
		if d.Priority != want[i].Priority {
			t.Fatalf("%s promise broken: fetched in the order %v; want priorities %v", promise, order(got), prioritiesOf(want))
		}
	}
	// Within one priority, publish order (the two given back go to the
	// end of theirs or keep their place; only the others are checked).
	back := map[string]bool{first[0].ID: true}
	if len(first) > 1 {
		back[first[1].ID] = true
	}
	var gotIDs, wantIDs []string
	for _, d := range got {
		if !back[d.ID] {
			gotIDs = append(gotIDs, d.ID)
		}
	}
	for _, m := range want {
		if !back[m.ID] {
			wantIDs = append(wantIDs, m.ID)
		}
	}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("%s promise broken: within a priority, not in publish order: fetched %v", promise, order(got))
	}
	for _, d := range got {
		c.ack(d)
	}
}

func prioritiesOf(ms []errand.Message) []uint8 {
	out := make([]uint8, len(ms))
	for i, m := range ms {
		out[i] = m.Priority
	}
	return out
}

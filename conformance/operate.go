package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

// The operator's capabilities of a broker (driver.Archiver, driver.Lister,
// driver.QueueLister, driver.Pauser, driver.Heartbeater), checked on the
// driver itself. Each case logs and checks nothing else when the harness
// does not declare the capability (Capabilities checks that the declaration
// matches what the driver implements).

// stamp is how far a time a driver stores may move on the way (a network
// server keeping milliseconds or seconds).
const stamp = 2 * time.Second

func near(got, want time.Time) bool {
	d := got.Sub(want)
	return d > -stamp && d < stamp
}

func (c *bcase) archiver() driver.Archiver {
	c.t.Helper()
	a, ok := c.drv.(driver.Archiver)
	if !ok {
		c.t.Fatalf("harness declares Archive but %T is not a driver.Archiver", c.drv)
	}
	return a
}

// archive fetches one message of c.q and archives it with the entry's
// reason, error and attempts at at, under keep.
func (c *bcase) archive(want errand.Message, reason, errText string, attempts int, at time.Time, keep driver.Retention) driver.ArchiveEntry {
	c.t.Helper()
	ds := c.fetchN(1, c.tm.Lease*10, c.tm.Prompt*5)
	if len(ds) != 1 || ds[0].ID != want.ID {
		c.t.Fatalf("fetched %v, want %s to archive it", ids(ds), want.ID)
	}
	e := driver.ArchiveEntry{Message: ds[0].Message, Reason: reason, Error: errText, Attempts: attempts, At: at}
	if err := c.archiver().Archive(c.ctx, ds[0], e, keep); err != nil {
		c.t.Fatalf("Archive(%s): %v", want.ID, err)
	}
	return e
}

// archiveNoMessage is archive with an entry carrying no message (an empty
// ID), which keeps d's message; it returns the entry as it must be kept.
func (c *bcase) archiveNoMessage(want errand.Message, reason, errText string, attempts int, at time.Time) driver.ArchiveEntry {
	c.t.Helper()
	ds := c.fetchN(1, c.tm.Lease*10, c.tm.Prompt*5)
	if len(ds) != 1 || ds[0].ID != want.ID {
		c.t.Fatalf("fetched %v, want %s to archive it", ids(ds), want.ID)
	}
	e := driver.ArchiveEntry{Reason: reason, Error: errText, Attempts: attempts, At: at}
	if err := c.archiver().Archive(c.ctx, ds[0], e, driver.Retention{}); err != nil {
		c.t.Fatalf("Archive(%s) with no message in the entry: %v", want.ID, err)
	}
	e.Message = ds[0].Message
	return e
}

// archived returns the IDs of queue's archive, newest first (up to 1000).
func (c *bcase) archived() []driver.ArchiveEntry {
	c.t.Helper()
	es, err := c.archiver().Archived(c.ctx, c.q, 0, 1000)
	if err != nil {
		c.t.Fatalf("Archived: %v", err)
	}
	return es
}

func entryIDs(es []driver.ArchiveEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = strings.TrimPrefix(e.ID, runID+"-")
	}
	return out
}

// sameEntry reports how got differs from the entry archived (nil: it does
// not).
func sameEntry(got, want driver.ArchiveEntry) error {
	var diffs []string
	if got.ID != want.ID || got.Queue != want.Queue || !bytes.Equal(got.Body, want.Body) {
		diffs = append(diffs, fmt.Sprintf("message {ID %q, Queue %q, Body %q}, want {%q, %q, %q}", got.ID, got.Queue, got.Body, want.ID, want.Queue, want.Body))
	}
	if got.Reason != want.Reason {
		diffs = append(diffs, fmt.Sprintf("Reason %q, want %q", got.Reason, want.Reason))
	}
	if got.Error != want.Error {
		diffs = append(diffs, fmt.Sprintf("Error %q, want %q", got.Error, want.Error))
	}
	if got.Attempts != want.Attempts {
		diffs = append(diffs, fmt.Sprintf("Attempts %d, want %d", got.Attempts, want.Attempts))
	}
	if !near(got.At, want.At) {
		diffs = append(diffs, fmt.Sprintf("At %v, want %v (within %v)", got.At, want.At, stamp))
	}
	if diffs == nil {
		return nil
	}
	return errors.New(strings.Join(diffs, "; "))
}

// archiveKeepsEntry: an archived delivery leaves its queue for good and the
// archive keeps it with every field, newest first, a page at a time.
func archiveKeepsEntry(t testing.TB, h BrokerHarness) {
	if !h.Caps.Archive {
		t.Logf("broker does not declare Archive; errand rejects (dead-letters) what fails for good")
		return
	}
	const promise = "archive (what fails for good is kept with its reason, last error and attempts)"
	c := newBCase(t, h)
	ms := []errand.Message{c.msg("a1", time.Time{}), c.msg("a2", time.Time{}), c.msg("a3", time.Time{})}
	for _, m := range ms {
		c.publish(m)
	}
	base := time.Now().Add(-time.Minute)
	var kept []driver.ArchiveEntry
	for i, m := range ms {
		at := base.Add(time.Duration(i) * 10 * time.Second)
		if i == 0 {
			// No message given: the archive keeps the delivered one.
			kept = append(kept, c.archiveNoMessage(m, fmt.Sprintf("reason %d", i), fmt.Sprintf("error %d of %s", i, runID), i+2, at))
			continue
		}
		kept = append(kept, c.archive(m, fmt.Sprintf("reason %d", i), fmt.Sprintf("error %d of %s", i, runID), i+2, at, driver.Retention{}))
	}
	if again := c.fetch(1, time.Minute, c.tm.Lease*3); len(again) != 0 {
		t.Fatalf("%s promise broken: archived messages were delivered again (%v) after their leases ran out; Archive removes a delivery for good", promise, ids(again))
	}
	got := c.archived()
	if len(got) != 3 {
		t.Fatalf("%s promise broken: archived 3 messages, Archived lists %v", promise, entryIDs(got))
	}
	for i, e := range got {
		if err := sameEntry(e, kept[2-i]); err != nil {
			t.Errorf("%s promise broken: Archived entry %d (newest first, want %s): %v", promise, i, kept[2-i].ID, err)
		}
	}
	a := c.archiver()
	for _, pg := range []struct {
		offset, limit int
		want          []string
	}{{0, 2, []string{"a3", "a2"}}, {1, 1, []string{"a2"}}, {2, 5, []string{"a1"}}, {3, 5, nil}} {
		es, err := a.Archived(c.ctx, c.q, pg.offset, pg.limit)
		if err != nil {
			t.Fatalf("Archived(offset %d, limit %d): %v", pg.offset, pg.limit, err)
		}
		if got := entryIDs(es); !slices.Equal(got, pg.want) && len(got)+len(pg.want) > 0 {
			t.Errorf("%s promise broken: Archived(offset %d, limit %d) = %v, want %v (newest first)", promise, pg.offset, pg.limit, got, pg.want)
		}
	}
	e, err := a.ArchivedEntry(c.ctx, c.q, ms[1].ID)
	if err != nil {
		t.Fatalf("%s promise broken: ArchivedEntry(%s): %v", promise, ms[1].ID, err)
	}
	if err := sameEntry(e, kept[1]); err != nil {
		t.Errorf("%s promise broken: ArchivedEntry(%s): %v", promise, ms[1].ID, err)
	}
	if _, err := a.ArchivedEntry(c.ctx, c.q, runID+"-never-archived"); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("%s promise broken: ArchivedEntry of an ID never archived returned %v, want an error satisfying errors.Is(err, errand.ErrNotArchived)", promise, err)
	}
	if h.Caps.Stats {
		// The counts may lag the browses above a moment (RabbitMQ puts the
		// entries a browse took back into the dead queue asynchronously,
		// after the browsing channel closed): they must settle within
		// Prompt, and stay wrong for no longer.
		var st driver.QueueStats
		var err error
		for deadline := time.Now().Add(c.tm.Prompt * 5); ; {
			st, err = statsOf(c.ctx, c.drv, c.q)
			if err == nil && st.Dead == 3 && st.Pending+st.InFlight+st.Delayed == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling a count, with a deadline
		}
		if err != nil || st.Dead != 3 || st.Pending+st.InFlight+st.Delayed != 0 {
			t.Errorf("stats promise broken: after archiving every message of the queue Stats = %+v, %v (still %v later); want Dead 3 (the archive's entries) and nothing pending, delayed or in flight", st, err, c.tm.Prompt*5)
		}
	}
}

// archiveLeaseLost: archiving a delivery whose lease ran out and whose
// message another consumer holds now fails with ErrLeaseLost (where the
// broker detects lost leases), archives nothing, and leaves the message
// with the other consumer.
func archiveLeaseLost(t testing.TB, h BrokerHarness) {
	if !h.Caps.Archive {
		t.Logf("broker does not declare Archive")
		return
	}
	const promise = "archive lease (Archive of a delivery whose lease was lost is ErrLeaseLost, like Ack)"
	c := newBCase(t, h)
	m := c.msg("lost", time.Time{})
	c.publish(m)
	first := c.fetchN(1, c.tm.Lease, c.tm.Prompt*5)
	if len(first) != 1 {
		t.Fatalf("fetched %d, want 1", len(first))
	}
	// The first consumer stalls; its lease runs out and another takes it.
	again := c.fetchN(1, time.Minute, c.tm.Lease*3+c.tm.Prompt*5)
	if len(again) != 1 || again[0].ID != m.ID {
		t.Fatalf("at-least-once promise broken: a message whose %v lease ran out was not delivered again (got %v)", c.tm.Lease, ids(again))
	}
	err := c.archiver().Archive(c.ctx, first[0], driver.ArchiveEntry{Message: first[0].Message, Reason: "test", Error: "test", Attempts: 1, At: time.Now()}, driver.Retention{})
	if !h.Caps.DetectsLostLease {
		t.Logf("broker declares it cannot detect a lost lease; the stalled consumer's late Archive returned %v", err)
		return
	}
	switch {
	case err == nil:
		t.Errorf("%s promise broken: the stalled consumer's late Archive succeeded although another consumer holds the message; want driver.ErrLeaseLost", promise)
	case !errors.Is(err, driver.ErrLeaseLost):
		t.Errorf("%s promise broken: late Archive error %v does not satisfy errors.Is(err, driver.ErrLeaseLost)", promise, err)
	}
	if got := c.archived(); len(got) != 0 {
		t.Errorf("%s promise broken: a late Archive that lost its lease archived %v; want nothing archived", promise, entryIDs(got))
	}
	if err := c.b.Extend(c.ctx, again[0], time.Minute); err != nil {
		t.Errorf("%s promise broken: after a late Archive by a stalled consumer, the consumer holding the message cannot extend it: %v", promise, err)
	}
	c.ack(again[0])
}

// pageBounds: Archived and List refuse an offset below 0 and a limit
// below 1 with an error (never an empty page, never every entry).
func pageBounds(t testing.TB, h BrokerHarness) {
	if !h.Caps.Archive && !h.Caps.List {
		t.Logf("broker declares neither Archive nor List")
		return
	}
	const promise = "page bounds (Archived and List: an offset below 0 or a limit below 1 is an error)"
	c := newBCase(t, h)
	m := c.msg("pb", time.Time{})
	c.publish(m)
	if h.Caps.Archive {
		c.archive(m, "test", "test", 1, time.Now(), driver.Retention{})
	} else {
		c.publish(c.msg("pb2", time.Time{}))
	}
	for _, pg := range [][2]int{{0, 0}, {0, -1}, {-1, 1}} {
		if h.Caps.Archive {
			if es, err := c.archiver().Archived(c.ctx, c.q, pg[0], pg[1]); err == nil {
				t.Errorf("%s promise broken: Archived(offset %d, limit %d) = %v, nil; want an error", promise, pg[0], pg[1], entryIDs(es))
			}
		}
		if h.Caps.List {
			if ls, err := c.drv.(driver.Lister).List(c.ctx, c.q, driver.ListPending, pg[0], pg[1]); err == nil {
				t.Errorf("%s promise broken: List(pending, offset %d, limit %d) = %v, nil; want an error", promise, pg[0], pg[1], listedIDs(ls))
			}
		}
	}
}

// archiveRetention: Archive drops, in the same step, the entries beyond
// MaxCount (oldest first) and those older than MaxAge.
func archiveRetention(t testing.TB, h BrokerHarness) {
	if !h.Caps.Archive {
		t.Logf("broker does not declare Archive")
		return
	}
	const promise = "archive retention (Archive drops the oldest entries past MaxCount and those older than MaxAge)"
	c := newBCase(t, h)
	// MaxCount.
	var ms []errand.Message
	for i := range 5 {
		ms = append(ms, c.msg(fmt.Sprintf("n%d", i), time.Time{}))
	}
	c.publish(ms...)
	base := time.Now().Add(-time.Minute)
	for i := range ms {
		ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
		if len(ds) != 1 {
			t.Fatalf("fetched %d, want 1", len(ds))
		}
		e := driver.ArchiveEntry{Message: ds[0].Message, Reason: "test", Error: "test", Attempts: 1, At: base.Add(time.Duration(i) * time.Second)}
		if err := c.archiver().Archive(c.ctx, ds[0], e, driver.Retention{MaxCount: 3}); err != nil {
			t.Fatalf("Archive: %v", err)
		}
	}
	got := entryIDs(c.archived())
	slices.Sort(got)
	if want := []string{"n2", "n3", "n4"}; !slices.Equal(got, want) {
		t.Fatalf("%s promise broken: archived 5 entries with MaxCount 3, the archive holds %v; want the newest three %v", promise, got, want)
	}

	// MaxAge, in a queue of its own.
	c.q = name(t, "age")
	age := c.tm.Delay * 4
	keep := driver.Retention{MaxAge: age}
	young := []errand.Message{c.msg("y1", time.Time{}), c.msg("y2", time.Time{})}
	c.publish(young...)
	c.archive(young[0], "test", "test", 1, time.Now(), keep)
	e2 := c.archive(young[1], "test", "test", 1, time.Now(), keep)
	if got := entryIDs(c.archived()); len(got) != 2 {
		t.Fatalf("%s promise broken: two entries archived just now with MaxAge %v; the archive holds %v, want both", promise, age, got)
	}
	// The entries grow old: time passing is the event.
	if err := sleepUntil(c.ctx, e2.At.Add(age+c.tm.DelayBound)); err != nil {
		t.Fatal(err)
	}
	last := c.msg("y3", time.Time{})
	c.publish(last)
	c.archive(last, "test", "test", 1, time.Now(), keep)
	if got := entryIDs(c.archived()); !slices.Equal(got, []string{"y3"}) {
		t.Fatalf("%s promise broken: after %v, archiving with MaxAge %v left %v; want only the new y3 (the others are older than MaxAge)", promise, age+c.tm.DelayBound, age, got)
	}
}

// archiveRequeue: Requeue takes the entry out of the archive and publishes
// the message in one step; a second Requeue of the ID, or a concurrent one,
// publishes nothing and says ErrNotArchived.
func archiveRequeue(t testing.TB, h BrokerHarness) {
	if !h.Caps.Archive {
		t.Logf("broker does not declare Archive")
		return
	}
	const promise = "requeue (an archived message is sent again exactly once, atomically)"
	c := newBCase(t, h)
	a := c.archiver()
	m := c.msg("rq", time.Time{})
	c.publish(m)
	c.archive(m, "test", "test", 1, time.Now(), driver.Retention{})
	again := m
	again.Body = []byte(`{"requeued":"` + runID + `"}`)
	if err := a.Requeue(c.ctx, c.q, m.ID, again); err != nil {
		t.Fatalf("%s promise broken: Requeue of an archived entry: %v", promise, err)
	}
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 || ds[0].ID != m.ID || !bytes.Equal(ds[0].Body, again.Body) {
		t.Fatalf("%s promise broken: after Requeue, fetched %v; want %s with the message Requeue was given", promise, ids(ds), m.ID)
	}
	c.ack(ds[0])
	if got := c.archived(); len(got) != 0 {
		t.Errorf("%s promise broken: the archive still holds %v after Requeue", promise, entryIDs(got))
	}
	if _, err := a.ArchivedEntry(c.ctx, c.q, m.ID); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("%s promise broken: ArchivedEntry of a requeued ID returned %v, want errand.ErrNotArchived", promise, err)
	}
	if err := a.Requeue(c.ctx, c.q, m.ID, again); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("%s promise broken: a second Requeue of %s returned %v, want an error satisfying errors.Is(err, errand.ErrNotArchived)", promise, m.ID, err)
	}
	if ds := c.fetch(1, time.Minute, c.tm.Lease*3); len(ds) != 0 {
		t.Fatalf("%s promise broken: a second Requeue of an ID no longer archived published it again (%v)", promise, ids(ds))
	}

	// Operators racing on one entry: exactly one wins.
	n := c.msg("race", time.Time{})
	c.publish(n)
	c.archive(n, "test", "test", 1, time.Now(), driver.Retention{})
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			errs[i] = a.Requeue(c.ctx, c.q, n.ID, n)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, errand.ErrNotArchived):
			t.Errorf("%s promise broken: a Requeue racing others returned %v, want nil or errand.ErrNotArchived", promise, err)
		}
	}
	if won != 1 {
		t.Errorf("%s promise broken: %d of %d concurrent Requeues of one entry succeeded, want exactly 1", promise, won, racers)
	}
	got := c.fetchN(racers, time.Minute, c.tm.Prompt*2)
	if len(got) != 1 {
		t.Fatalf("%s promise broken: %d concurrent Requeues of one entry published it %d times, want once", promise, racers, len(got))
	}
}

// archiveDelete: DeleteArchived removes the entries named and counts them.
func archiveDelete(t testing.TB, h BrokerHarness) {
	if !h.Caps.Archive {
		t.Logf("broker does not declare Archive")
		return
	}
	const promise = "archive delete (DeleteArchived removes the entries named and counts those there were)"
	c := newBCase(t, h)
	a := c.archiver()
	ms := []errand.Message{c.msg("d1", time.Time{}), c.msg("d2", time.Time{}), c.msg("d3", time.Time{})}
	c.publish(ms...)
	for range ms {
		ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
		if len(ds) != 1 {
			t.Fatalf("fetched %d, want 1", len(ds))
		}
		if err := a.Archive(c.ctx, ds[0], driver.ArchiveEntry{Message: ds[0].Message, Reason: "test", Error: "test", Attempts: 1, At: time.Now()}, driver.Retention{}); err != nil {
			t.Fatalf("Archive: %v", err)
		}
	}
	n, err := a.DeleteArchived(c.ctx, c.q, ms[0].ID, ms[2].ID, runID+"-never-archived")
	if err != nil || n != 2 {
		t.Errorf("%s promise broken: DeleteArchived of two archived IDs and an unknown one = %d, %v; want 2, nil", promise, n, err)
	}
	if got := entryIDs(c.archived()); !slices.Equal(got, []string{"d2"}) {
		t.Errorf("%s promise broken: after deleting d1 and d3 the archive holds %v, want [d2]", promise, got)
	}
	if n, err := a.DeleteArchived(c.ctx, c.q, ms[0].ID); err != nil || n != 0 {
		t.Errorf("%s promise broken: deleting an entry already deleted = %d, %v; want 0, nil", promise, n, err)
	}
	if ds := c.fetch(1, time.Minute, c.tm.Lease*2); len(ds) != 0 {
		t.Errorf("%s promise broken: DeleteArchived put %v back on the queue", promise, ids(ds))
	}
}

func listedIDs(ls []driver.Listed) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = strings.TrimPrefix(l.ID, runID+"-")
	}
	return out
}

// listByState: List pages through pending, scheduled, in flight and
// recently completed messages, each in its order and with its At; Stats
// counts the acks.
func listByState(t testing.TB, h BrokerHarness) {
	if !h.Caps.List {
		t.Logf("broker does not declare List")
		return
	}
	const promise = "listing by state (pending and in flight in delivery order, scheduled by due time, completed newest first, a page at a time)"
	c := newBCase(t, h)
	l, ok := c.drv.(driver.Lister)
	if !ok {
		t.Fatalf("harness declares List but %T is not a driver.Lister", c.drv)
	}
	list := func(s driver.ListState, offset, limit int) []driver.Listed {
		t.Helper()
		ls, err := l.List(c.ctx, c.q, s, offset, limit)
		if err != nil {
			t.Fatalf("List(%s, %d, %d): %v", s, offset, limit, err)
		}
		return ls
	}
	now := time.Now()
	s1, s2 := c.msg("s1", now.Add(time.Hour)), c.msg("s2", now.Add(2*time.Hour))
	c.publish(s2, s1)
	for i := 1; i <= 5; i++ {
		c.publish(c.msg(fmt.Sprintf("p%d", i), time.Time{}))
	}
	// p1 stays in flight; p2 and p3 are acked, in that order.
	held := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(held) != 1 {
		t.Fatalf("fetched %d, want 1", len(held))
	}
	var ackedAt []time.Time
	for range 2 {
		ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
		if len(ds) != 1 {
			t.Fatalf("fetched %d, want 1", len(ds))
		}
		c.ack(ds[0])
		ackedAt = append(ackedAt, time.Now())
	}
	if got := ids(held); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("delivery order: fetched %v first, want p1 (published first)", got)
	}
	check := func(s driver.ListState, offset, limit int, want ...string) []driver.Listed {
		t.Helper()
		ls := list(s, offset, limit)
		if got := listedIDs(ls); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Errorf("%s promise broken: List(%s, offset %d, limit %d) = %v, want %v", promise, s, offset, limit, got, want)
		}
		return ls
	}
	pending := check(driver.ListPending, 0, 10, "p4", "p5")
	check(driver.ListPending, 1, 1, "p5")
	inflight := check(driver.ListInFlight, 0, 10, "p1")
	sched := check(driver.ListScheduled, 0, 10, "s1", "s2")
	check(driver.ListScheduled, 1, 5, "s2")
	check(driver.ListScheduled, 2, 5)
	done := check(driver.ListCompleted, 0, 10, "p3", "p2")
	check(driver.ListCompleted, 0, 1, "p3")
	check(driver.ListCompleted, 1, 1, "p2")
	for _, x := range append(pending, inflight...) {
		if !x.At.IsZero() {
			t.Errorf("%s promise broken: pending or in-flight %s listed with At %v, want zero", promise, x.ID, x.At)
		}
	}
	for i, x := range sched {
		if due := []time.Time{s1.NotBefore, s2.NotBefore}[i]; !near(x.At, due) {
			t.Errorf("%s promise broken: scheduled %s listed with At %v, want its due time %v", promise, x.ID, x.At, due)
		}
	}
	for i, x := range done {
		if i < 2 && !near(x.At, ackedAt[1-i]) {
			t.Errorf("%s promise broken: completed %s listed with At %v, want when it was acked (%v)", promise, x.ID, x.At, ackedAt[1-i])
		}
		if i < 2 && !strings.Contains(string(x.Body), runID) {
			t.Errorf("%s promise broken: completed %s listed with body %q, want the message's body", promise, x.ID, x.Body)
		}
	}
	if _, err := l.List(c.ctx, c.q, driver.ListState("no-such-state"), 0, 10); err == nil {
		t.Errorf("%s promise broken: List of an unknown state returned no error", promise)
	}
	if h.Caps.Stats {
		if st, err := statsOf(c.ctx, c.drv, c.q); err != nil || st.Completed != 2 {
			t.Errorf("stats promise broken: after two acks Stats = %+v, %v; want Completed 2 (a Lister counts its acks)", st, err)
		}
	}
}

// queuesList: every queue published to is listed, whatever it holds now.
func queuesList(t testing.TB, h BrokerHarness) {
	if !h.Caps.Queues {
		t.Logf("broker does not declare Queues")
		return
	}
	const promise = "queue listing (every queue a message was published to)"
	c := newBCase(t, h)
	ql, ok := c.drv.(driver.QueueLister)
	if !ok {
		t.Fatalf("harness declares Queues but %T is not a driver.QueueLister", c.drv)
	}
	done, later := c.q, name(t, "later")
	c.publish(c.msg("x", time.Time{}))
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("fetched %d, want 1", len(ds))
	}
	c.ack(ds[0])
	m := c.msg("y", time.Now().Add(time.Hour))
	m.Queue = later
	c.publish(m)
	qs, err := ql.Queues(c.ctx)
	if err != nil {
		t.Fatalf("Queues: %v", err)
	}
	for _, q := range []string{done, later} {
		if !slices.Contains(qs, q) {
			t.Errorf("%s promise broken: Queues does not list %s (one queue's message was acked, the other's is delayed): %v", promise, q, qs)
		}
	}
}

// queuesKnown: errand's Server.Queue follows one rule on every broker: a
// queue that has been used answers its counts however idle it is now —
// every message acked, or every message purged — even after an
// operator's listing (where a broker may take idle queues out of the
// list: driver.QueueKnower); on a broker that lists its queues, a name
// never used is ErrUnknownQueue. A broker that lists no queues cannot
// tell a name never used from an empty queue: it answers counts for any
// name.
func queuesKnown(t testing.TB, h BrokerHarness) {
	if !h.Caps.Queues && !h.Caps.Stats {
		t.Logf("broker declares neither Queues nor Stats: Server.Queue is unsupported")
		return
	}
	const promise = "known queues (Server.Queue answers the counts of a queue that has been used, however idle; ErrUnknownQueue only for a name never used)"
	c := newBCase(t, h)
	be := memorybackend.New(nil)
	t.Cleanup(func() { be.Close() })
	srv, err := errand.NewServer(errand.Config{Broker: c.drv, Backend: be})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	drained := c.q
	c.publish(c.msg("k", time.Time{}))
	ds := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(ds) != 1 {
		t.Fatalf("fetched %d, want 1", len(ds))
	}
	c.ack(ds[0])
	used := map[string]string{drained: "its only message acked"}
	if h.Caps.Purge {
		emptied := name(t, "emptied")
		c.q = emptied
		c.publish(c.msg("p1", time.Time{}), c.msg("p2", time.Time{}))
		if _, err := c.drv.(driver.Purger).Purge(c.ctx, emptied); err != nil {
			t.Fatalf("Purge: %v", err)
		}
		used[emptied] = "its messages purged, none ever acked"
	}
	if h.Caps.Queues {
		// An operator's listing, where a broker may take the idle queues
		// out of its list.
		if _, err := srv.Queues(c.ctx); err != nil {
			t.Fatalf("Server.Queues: %v", err)
		}
	}
	for q, what := range used {
		qi, err := srv.Queue(c.ctx, q)
		switch {
		case err != nil:
			t.Errorf("%s promise broken: Server.Queue of a queue used and now idle (%s) returned %v; want its counts", promise, what, err)
		case qi.Name != q:
			t.Errorf("%s promise broken: Server.Queue(%s) answered for %q", promise, q, qi.Name)
		}
	}
	never := name(t, "never-used")
	_, err = srv.Queue(c.ctx, never)
	if !h.Caps.Queues {
		if err != nil {
			t.Errorf("%s promise broken: on a broker that does not list queues, Server.Queue of a name never used returned %v; want its counts (zeros): such a broker cannot tell it from an empty queue", promise, err)
		}
		t.Logf("broker does not declare Queues: Server.Queue answers counts for any name, used or not")
		return
	}
	if !errors.Is(err, errand.ErrUnknownQueue) {
		t.Errorf("%s promise broken: Server.Queue of a name never used returned %v; want an error satisfying errors.Is(err, errand.ErrUnknownQueue)", promise, err)
	}
}

// pauseFlag: Pause sets a flag Paused lists until Resume.
func pauseFlag(t testing.TB, h BrokerHarness) {
	if !h.Caps.Pause {
		t.Logf("broker does not declare Pause")
		return
	}
	const promise = "pause (Paused lists a queue from Pause until Resume)"
	c := newBCase(t, h)
	p, ok := c.drv.(driver.Pauser)
	if !ok {
		t.Fatalf("harness declares Pause but %T is not a driver.Pauser", c.drv)
	}
	q1, q2 := c.q, name(t, "q2")
	paused := func() []string {
		t.Helper()
		ps, err := p.Paused(c.ctx)
		if err != nil {
			t.Fatalf("Paused: %v", err)
		}
		return ps
	}
	is := func(q string, want bool, when string) {
		t.Helper()
		if ps := paused(); slices.Contains(ps, q) != want {
			t.Errorf("%s promise broken: %s, Paused = %v; want %s listed: %v", promise, when, ps, q, want)
		}
	}
	is(q1, false, "before any Pause")
	for _, q := range []string{q1, q1, q2} {
		if err := p.Pause(c.ctx, q); err != nil {
			t.Fatalf("Pause(%s): %v", q, err)
		}
	}
	is(q1, true, "after Pause (twice)")
	is(q2, true, "after Pause")
	if err := p.Resume(c.ctx, q1); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	is(q1, false, "after Resume")
	is(q2, true, "after another queue's Resume")
	if err := p.Resume(c.ctx, q2); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	is(q2, false, "after Resume")
}

// heartbeatTTL: Beats returns what each live worker beat, replaced by its
// next Beat, gone after Unbeat or once its ttl ran out.
func heartbeatTTL(t testing.TB, h BrokerHarness) {
	if !h.Caps.Heartbeat {
		t.Logf("broker does not declare Heartbeat")
		return
	}
	const promise = "heartbeats (Beats lists a worker's last Beat until Unbeat or its ttl runs out)"
	c := newBCase(t, h)
	hb, ok := c.drv.(driver.Heartbeater)
	if !ok {
		t.Fatalf("harness declares Heartbeat but %T is not a driver.Heartbeater", c.drv)
	}
	w1, w2 := name(t, "w1"), name(t, "w2")
	data := func(w, v string) []byte { return []byte(`{"id":"` + w + `","v":"` + v + `"}`) }
	// beats returns the data of this case's workers, by content.
	beats := func() []string {
		t.Helper()
		bs, err := hb.Beats(c.ctx)
		if err != nil {
			t.Fatalf("Beats: %v", err)
		}
		var out []string
		for _, b := range bs {
			if bytes.Contains(b, []byte(w1)) || bytes.Contains(b, []byte(w2)) {
				out = append(out, string(b))
			}
		}
		slices.Sort(out)
		return out
	}
	short := c.tm.Prompt
	beat := func(w, v string, ttl time.Duration) time.Time {
		t.Helper()
		at := time.Now()
		if err := hb.Beat(c.ctx, w, data(w, v), ttl); err != nil {
			t.Fatalf("Beat(%s): %v", w, err)
		}
		return at
	}
	beat(w1, "a", time.Minute)
	beat(w1, "b", time.Minute)
	at := beat(w2, "a", short)
	got := beats()
	if time.Since(at) < short {
		if want := []string{string(data(w1, "b")), string(data(w2, "a"))}; !slices.Equal(got, want) {
			t.Fatalf("%s promise broken: Beats = %q; want each worker's last Beat %q", promise, got, want)
		}
	}
	if err := hb.Unbeat(c.ctx, w1); err != nil {
		t.Fatalf("Unbeat: %v", err)
	}
	if got := beats(); slices.Contains(got, string(data(w1, "b"))) {
		t.Errorf("%s promise broken: Beats = %q still lists %s after its Unbeat", promise, got, w1)
	}
	// w2's ttl runs out: time passing is the event.
	if err := sleepUntil(c.ctx, at.Add(short+c.tm.DelayBound)); err != nil {
		t.Fatal(err)
	}
	if got := beats(); len(got) != 0 {
		t.Errorf("%s promise broken: %v after a Beat with ttl %v, Beats = %q; a worker that stopped beating must disappear", promise, short+c.tm.DelayBound, short, got)
	}
}

// listFind: Find returns a message by its ID with the list it is on — in
// flight, pending, scheduled (At its due time), completed — and reports
// an unknown ID as not found.
func listFind(t testing.TB, h BrokerHarness) {
	if !h.Caps.Find {
		t.Logf("broker does not declare Find; errand's Server.Task pages through the lists")
		return
	}
	const promise = "find (Find returns one message by ID with its list)"
	c := newBCase(t, h)
	f, ok := c.drv.(driver.Finder)
	if !ok {
		t.Fatalf("harness declares Find but %T is not a driver.Finder", c.drv)
	}
	due := time.Now().Add(time.Hour)
	fl, pe, sc, co := c.msg("f-flight", time.Time{}), c.msg("f-pend", time.Time{}), c.msg("f-sched", due), c.msg("f-done", time.Time{})
	c.publish(fl)
	held := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(held) != 1 || held[0].ID != fl.ID {
		t.Fatalf("fetched %v, want %s", ids(held), fl.ID)
	}
	c.publish(co)
	done := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(done) != 1 || done[0].ID != co.ID {
		t.Fatalf("fetched %v, want %s", ids(done), co.ID)
	}
	c.ack(done[0])
	c.publish(pe, sc)
	for _, w := range []struct {
		m     errand.Message
		state driver.ListState
	}{{fl, driver.ListInFlight}, {pe, driver.ListPending}, {sc, driver.ListScheduled}, {co, driver.ListCompleted}} {
		l, s, ok, err := f.Find(c.ctx, c.q, w.m.ID)
		switch {
		case err != nil:
			t.Errorf("%s promise broken: Find(%s): %v", promise, w.m.ID, err)
		case !ok:
			t.Errorf("%s promise broken: Find(%s) found nothing; the message is %s", promise, w.m.ID, w.state)
		case s != w.state || l.ID != w.m.ID || !bytes.Equal(l.Body, w.m.Body):
			t.Errorf("%s promise broken: Find(%s) = {ID %q, Body %q} on %q; want the message on %q", promise, w.m.ID, l.ID, l.Body, s, w.state)
		case w.state == driver.ListScheduled && !near(l.At, due):
			t.Errorf("%s promise broken: Find(%s) of a scheduled message has At %v, want its due time %v", promise, w.m.ID, l.At, due)
		}
	}
	if _, s, ok, err := f.Find(c.ctx, c.q, runID+"-never-sent"); err != nil || ok {
		t.Errorf("%s promise broken: Find of an ID never sent = %q, found %v, %v; want not found, nil", promise, s, ok, err)
	}
	c.ack(held[0])
}

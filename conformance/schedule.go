package conformance

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
)

// The broker's schedule store (driver.ScheduleStore), on which errand's
// periodic scheduler runs each tick once however many replicas run. The
// cases check the driver itself; each logs and checks nothing else when
// the harness does not declare Schedules.

func (c *bcase) scheduleStore() driver.ScheduleStore {
	c.t.Helper()
	st, ok := c.drv.(driver.ScheduleStore)
	if !ok {
		c.t.Fatalf("harness declares Schedules but %T is not a driver.ScheduleStore", c.drv)
	}
	return st
}

// ownSchedules returns the definitions of ids among every schedule the
// store holds (a shared server holds other cases' too).
func ownSchedules(t testing.TB, c *bcase, st driver.ScheduleStore, ids ...string) map[string]string {
	t.Helper()
	all, err := st.Schedules(c.ctx)
	if err != nil {
		t.Fatalf("Schedules: %v", err)
	}
	out := map[string]string{}
	for _, id := range ids {
		if d, ok := all[id]; ok {
			out[id] = string(d)
		}
	}
	return out
}

// scheduleStore: definitions are stored, listed, replaced and deleted, and
// every other schedule is left alone.
func scheduleStoreCase(t testing.TB, h BrokerHarness) {
	if !h.Caps.Schedules {
		t.Logf("broker does not declare Schedules")
		return
	}
	const promise = "schedule store (every replica sees the definitions put, changed and deleted anywhere)"
	c := newBCase(t, h)
	st := c.scheduleStore()
	a, b := name(t, "a"), name(t, "b")
	put := func(id, data string) {
		t.Helper()
		if err := st.PutSchedule(c.ctx, id, []byte(data)); err != nil {
			t.Fatalf("PutSchedule(%s): %v", id, err)
		}
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		if got := ownSchedules(t, c, st, a, b); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s promise broken: %s, Schedules holds %q; want %q", promise, when, got, want)
		}
	}
	check("before any PutSchedule", map[string]string{})
	put(a, `{"spec":"@every 1s","v":1}`)
	put(b, `{"spec":"@hourly"}`)
	check("after putting two schedules", map[string]string{a: `{"spec":"@every 1s","v":1}`, b: `{"spec":"@hourly"}`})
	put(a, `{"spec":"*/5 * * * *","v":2}`)
	check("after changing one", map[string]string{a: `{"spec":"*/5 * * * *","v":2}`, b: `{"spec":"@hourly"}`})
	if err := st.DeleteSchedule(c.ctx, a); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	check("after deleting one", map[string]string{b: `{"spec":"@hourly"}`})
	if err := st.DeleteSchedule(c.ctx, name(t, "unknown")); err != nil {
		t.Errorf("%s promise broken: DeleteSchedule of an unknown ID: %v; want nil", promise, err)
	}
	if err := st.DeleteSchedule(c.ctx, b); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	check("after deleting both", map[string]string{})
}

// scheduleClaimOnce: of many concurrent claims of one tick exactly one
// wins, round after round; a tick no later than the one claimed loses; a
// later one wins; a schedule that does not exist cannot be claimed.
func scheduleClaimOnce(t testing.TB, h BrokerHarness) {
	if !h.Caps.Schedules {
		t.Logf("broker does not declare Schedules")
		return
	}
	const promise = "tick claim (of concurrent claims of one (schedule, tick) exactly one wins, and only a later tick wins after it)"
	c := newBCase(t, h)
	st := c.scheduleStore()
	id := name(t, "s")
	if err := st.PutSchedule(c.ctx, id, []byte(`{}`)); err != nil {
		t.Fatalf("PutSchedule: %v", err)
	}
	t.Cleanup(func() { st.DeleteSchedule(c.ctx, id) })
	claim := func(tick time.Time) bool {
		t.Helper()
		ok, err := st.ClaimTick(c.ctx, id, tick)
		if err != nil {
			t.Fatalf("ClaimTick(%v): %v", tick, err)
		}
		return ok
	}
	base := time.Now().Truncate(time.Second).Add(time.Hour)
	const rounds, claimers = 10, 12
	for r := range rounds {
		tick := base.Add(time.Duration(r) * time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, errs := 0, []error{}
		start := make(chan struct{})
		for range claimers {
			wg.Go(func() {
				<-start
				ok, err := st.ClaimTick(c.ctx, id, tick)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					wins++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("ClaimTick: %v", errs[0])
		}
		if wins != 1 {
			t.Fatalf("%s promise broken: %d concurrent claims of tick %v (round %d) won %d times; want exactly 1 (the tick would run %d times)", promise, claimers, tick, r+1, wins, wins)
		}
	}
	last := base.Add((rounds - 1) * time.Second)
	if claim(last) {
		t.Errorf("%s promise broken: claiming tick %v again after it was claimed won", promise, last)
	}
	if claim(last.Add(-time.Second)) {
		t.Errorf("%s promise broken: claiming tick %v after the later tick %v was claimed won; an older tick must lose", promise, last.Add(-time.Second), last)
	}
	if claim(base.Add(-time.Hour)) {
		t.Errorf("%s promise broken: claiming tick %v, an hour before the tick claimed (%v), won", promise, base.Add(-time.Hour), last)
	}
	if got, err := st.LastTick(c.ctx, id); err != nil || !got.Equal(last) {
		t.Errorf("%s promise broken: LastTick = %v, %v; want %v, the latest tick claimed", promise, got, err, last)
	}
	next := last.Add(1500 * time.Millisecond)
	if !claim(next) {
		t.Errorf("%s promise broken: claiming tick %v, later than the tick claimed (%v), lost", promise, next, last)
	}
	if got, err := st.LastTick(c.ctx, id); err != nil || !got.Equal(next) {
		t.Errorf("%s promise broken: LastTick = %v, %v after claiming %v; want that tick (millisecond precision)", promise, got, err, next)
	}
	unknown := name(t, "unknown")
	if ok, err := st.ClaimTick(c.ctx, unknown, next); err != nil || ok {
		t.Errorf("%s promise broken: ClaimTick of a schedule that does not exist = %v, %v; want false (a replica that has not yet seen a removal must not run it)", promise, ok, err)
	}
	if got, err := st.LastTick(c.ctx, unknown); err != nil || !got.IsZero() {
		t.Errorf("%s promise broken: LastTick of an unknown schedule = %v, %v; want the zero time", promise, got, err)
	}
}

// scheduleDeleteForgetsClaims: deleting a schedule deletes its claimed
// tick with it; a schedule put again under the same ID starts afresh.
func scheduleDeleteForgetsClaims(t testing.TB, h BrokerHarness) {
	if !h.Caps.Schedules {
		t.Logf("broker does not declare Schedules")
		return
	}
	const promise = "schedule delete (a deleted schedule leaves nothing behind: neither its definition nor its claimed tick)"
	c := newBCase(t, h)
	st := c.scheduleStore()
	id, other := name(t, "s"), name(t, "other")
	tick := time.Now().Truncate(time.Second).Add(time.Hour)
	for _, s := range []string{id, other} {
		if err := st.PutSchedule(c.ctx, s, []byte(`{"v":1}`)); err != nil {
			t.Fatalf("PutSchedule: %v", err)
		}
		if ok, err := st.ClaimTick(c.ctx, s, tick); err != nil || !ok {
			t.Fatalf("%s promise broken: the first claim of a new schedule = %v, %v; want true", promise, ok, err)
		}
	}
	t.Cleanup(func() { st.DeleteSchedule(c.ctx, other) })
	if err := st.DeleteSchedule(c.ctx, id); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	if got, err := st.LastTick(c.ctx, id); err != nil || !got.IsZero() {
		t.Errorf("%s promise broken: after DeleteSchedule, LastTick = %v, %v; want the zero time", promise, got, err)
	}
	if got := ownSchedules(t, c, st, id); len(got) != 0 {
		t.Errorf("%s promise broken: after DeleteSchedule, Schedules still holds %q", promise, got)
	}
	if ok, err := st.ClaimTick(c.ctx, id, tick.Add(time.Second)); err != nil || ok {
		t.Errorf("%s promise broken: ClaimTick of the deleted schedule = %v, %v; want false", promise, ok, err)
	}
	if got, err := st.LastTick(c.ctx, other); err != nil || !got.Equal(tick) {
		t.Errorf("%s promise broken: deleting one schedule changed another's LastTick to %v, %v; want %v", promise, got, err, tick)
	}
	// Put again: a new schedule, whose first tick (even the old one) wins.
	if err := st.PutSchedule(c.ctx, id, []byte(`{"v":2}`)); err != nil {
		t.Fatalf("PutSchedule: %v", err)
	}
	t.Cleanup(func() { st.DeleteSchedule(c.ctx, id) })
	if got, err := st.LastTick(c.ctx, id); err != nil || !got.IsZero() {
		t.Errorf("%s promise broken: a schedule put again after DeleteSchedule has LastTick %v, %v; want the zero time", promise, got, err)
	}
	if ok, err := st.ClaimTick(c.ctx, id, tick); err != nil || !ok {
		t.Errorf("%s promise broken: a schedule put again after DeleteSchedule cannot claim tick %v (%v, %v): its old claim survived the delete", promise, tick, ok, err)
	}
	if got := ownSchedules(t, c, st, id); !slices.Equal([]string{got[id]}, []string{`{"v":2}`}) {
		t.Errorf("%s promise broken: the schedule put again holds %q; want %q", promise, got[id], `{"v":2}`)
	}
}

package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/schedule"
)

// sent is one task a scheduler sent, as its server's send middleware saw
// it.
type sent struct {
	at  time.Time
	sig *errand.Signature
}

// recorder collects what the servers of a test send.
type recorder struct {
	mu   sync.Mutex
	sent []sent
}

func (r *recorder) middleware(next errand.SendHandler) errand.SendHandler {
	return func(ctx context.Context, sigs []*errand.Signature) error {
		r.mu.Lock()
		for _, s := range sigs {
			r.sent = append(r.sent, sent{at: time.Now(), sig: s.Copy()})
		}
		r.mu.Unlock()
		return next(ctx, sigs)
	}
}

func (r *recorder) all() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

// ticks returns the ticks sent for schedule id, in order sent.
func (r *recorder) ticks(t *testing.T, id string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, s := range r.all() {
		if s.sig.Headers[schedule.HeaderID] != id {
			continue
		}
		tick, err := time.Parse(time.RFC3339Nano, s.sig.Headers[schedule.HeaderTick].(string))
		if err != nil {
			t.Fatalf("header %s: %v", schedule.HeaderTick, err)
		}
		out = append(out, tick)
	}
	return out
}

// replica is one scheduler on its own server, over a shared broker.
func replica(t *testing.T, b *memorybroker.Broker, rec *recorder, cfg schedule.Config) *schedule.Scheduler {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil), SendMiddleware: []errand.SendMiddleware{rec.middleware}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Backend().Close() })
	s, err := schedule.New(srv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs s until the returned stop is called.
func run(s *schedule.Scheduler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		<-done
	}
}

func task(name string) *errand.Signature {
	return errand.NewSignature(name, "x", 1)
}

func set(t *testing.T, s *schedule.Scheduler, e schedule.Entry) {
	t.Helper()
	if err := s.Set(context.Background(), e); err != nil {
		t.Fatalf("Set(%s): %v", e.ID, err)
	}
}

// seconds returns n ticks one second apart after t0.
func seconds(t0 time.Time, from, n int) []time.Time {
	var out []time.Time
	for i := range n {
		out = append(out, t0.Add(time.Duration(from+i)*time.Second))
	}
	return out
}

func equalTimes(a, b []time.Time) bool {
	return slices.EqualFunc(a, b, func(x, y time.Time) bool { return x.Equal(y) })
}

// TestEverySecond: "@every 1s" sends one task per second, at its tick and
// never before, under the tick's UUID, with ETA and headers.
func TestEverySecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New(nil)
		rec := &recorder{}
		s := replica(t, b, rec, schedule.Config{})
		t0 := time.Now() // synctest's clock: a whole second
		set(t, s, schedule.Entry{ID: "tick", Spec: "@every 1s", Signature: task("tick")})
		stop := run(s)
		time.Sleep(10*time.Second + 500*time.Millisecond)
		stop()
		if got, want := rec.ticks(t, "tick"), seconds(t0, 1, 10); !equalTimes(got, want) {
			t.Fatalf("@every 1s for 10.5s sent ticks %v; want one per second %v", got, want)
		}
		for _, s := range rec.all() {
			tick, _ := time.Parse(time.RFC3339Nano, s.sig.Headers[schedule.HeaderTick].(string))
			if s.at.Before(tick) {
				t.Errorf("tick %v sent early, at %v", tick, s.at)
			}
			if s.sig.UUID != schedule.TickUUID("tick", tick) {
				t.Errorf("tick %v sent with UUID %s; want TickUUID %s", tick, s.sig.UUID, schedule.TickUUID("tick", tick))
			}
			if s.sig.ETA == nil || !s.sig.ETA.Equal(tick) {
				t.Errorf("tick %v sent with ETA %v; want the tick", tick, s.sig.ETA)
			}
			if s.sig.Name != "tick" || len(s.sig.Args) != 2 {
				t.Errorf("tick %v sent %s with %d args; want the template's task and args", tick, s.sig.Name, len(s.sig.Args))
			}
		}
	})
}

// TestCronSpec: a 5-field spec ticks on its minutes, in UTC by default.
func TestCronSpec(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New(nil)
		rec := &recorder{}
		s := replica(t, b, rec, schedule.Config{})
		t0 := time.Now()
		set(t, s, schedule.Entry{ID: "even", Spec: "*/2 * * * *", Signature: task("even")})
		stop := run(s)
		time.Sleep(10*time.Minute + time.Second)
		stop()
		var want []time.Time
		for i := 1; i <= 5; i++ {
			want = append(want, t0.Truncate(2*time.Minute).Add(time.Duration(i)*2*time.Minute))
		}
		if got := rec.ticks(t, "even"); !equalTimes(got, want) {
			t.Fatalf("*/2 * * * * over 10 minutes sent %v; want %v", got, want)
		}
	})
}

// TestNext: specs, descriptors, time zones and @every alignment.
func TestNext(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	at := time.Date(2026, 3, 10, 12, 34, 56, 789, time.UTC)
	cases := []struct {
		spec string
		loc  *time.Location
		want time.Time
	}{
		{"0 9 * * *", nil, time.Date(2026, 3, 11, 9, 0, 0, 0, time.UTC)},
		{"0 9 * * *", tokyo, time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)},
		{"CRON_TZ=Asia/Tokyo 0 9 * * *", nil, time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)},
		{"TZ=Asia/Tokyo 0 9 * * *", time.UTC, time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)},
		{"@hourly", nil, time.Date(2026, 3, 10, 13, 0, 0, 0, time.UTC)},
		{"@daily", tokyo, time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)},
		{"*/15 * * * *", nil, time.Date(2026, 3, 10, 12, 45, 0, 0, time.UTC)},
		{"@every 1s", nil, time.Date(2026, 3, 10, 12, 34, 57, 0, time.UTC)},
		{"@every 30s", nil, time.Date(2026, 3, 10, 12, 35, 0, 0, time.UTC)},
		{"@every 1h30m", nil, time.Date(2026, 3, 10, 13, 30, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		got, err := schedule.Entry{Spec: c.spec, Location: c.loc}.Next(at)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("Entry{Spec: %q, Location: %v}.Next(%v) = %v, %v; want %v", c.spec, c.loc, at, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "* * *", "61 * * * *", "@every 500ms", "@every 1.5s", "@every x", "CRON_TZ=Nowhere/Land 0 9 * * *", "CRON_TZ=UTC", "@fortnightly"} {
		if _, err := (schedule.Entry{Spec: bad}).Next(at); err == nil {
			t.Errorf("spec %q parsed; want an error", bad)
		}
	}
}

// TestSetChecks: Set refuses an entry it could not run.
func TestSetChecks(t *testing.T) {
	s := replica(t, memorybroker.New(nil), &recorder{}, schedule.Config{})
	ctx := context.Background()
	for _, e := range []schedule.Entry{
		{Spec: "@hourly", Signature: task("a")},
		{ID: "a", Spec: "@hourly"},
		{ID: "a", Spec: "@hourly", Signature: &errand.Signature{}},
		{ID: "a", Spec: "nonsense", Signature: task("a")},
		{ID: "a", Spec: "@hourly", Signature: task("a"), Missed: 7},
	} {
		if err := s.Set(ctx, e); err == nil {
			t.Errorf("Set(%+v) = nil; want an error", e)
		}
	}
	if l, err := s.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("List after refused Sets = %v, %v; want nothing", l, err)
	}
}

// TestSetListRemove: what Set stores, List returns, and a Set of the same
// definition keeps its Since.
func TestSetListRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := replica(t, memorybroker.New(nil), &recorder{}, schedule.Config{})
		ctx := context.Background()
		paris, err := time.LoadLocation("Europe/Paris")
		if err != nil {
			t.Skipf("no time zone database: %v", err)
		}
		t0 := time.Now()
		set(t, s, schedule.Entry{ID: "b", Spec: "0 9 * * *", Location: paris, Signature: task("b"), Missed: schedule.RunOnce})
		set(t, s, schedule.Entry{ID: "a", Spec: "@every 5s", Signature: task("a")})
		time.Sleep(time.Minute)
		set(t, s, schedule.Entry{ID: "b", Spec: "0 9 * * *", Location: paris, Signature: task("b"), Missed: schedule.RunOnce})
		l, err := s.List(ctx)
		if err != nil || len(l) != 2 {
			t.Fatalf("List = %v, %v; want 2 entries", l, err)
		}
		a, b := l[0], l[1]
		if a.ID != "a" || a.Spec != "@every 5s" || a.Missed != schedule.Skip || a.Signature.Name != "a" {
			t.Errorf("List()[0] = %+v; want a's definition", a)
		}
		if b.ID != "b" || b.Location.String() != "Europe/Paris" || b.Missed != schedule.RunOnce || !b.Since.Equal(t0) {
			t.Errorf("List()[1] = %+v; want b's definition, Since %v kept by a Set of the same definition", b, t0)
		}
		set(t, s, schedule.Entry{ID: "b", Spec: "0 10 * * *", Location: paris, Signature: task("b")})
		if l, _ := s.List(ctx); len(l) != 2 || l[1].Spec != "0 10 * * *" || !l[1].Since.Equal(t0.Add(time.Minute)) {
			t.Errorf("after a change, List()[1] = %+v; want the new spec, Since now", l[1])
		}
		if err := s.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.Remove(ctx, "unknown"); err != nil {
			t.Errorf("Remove of an unknown ID: %v", err)
		}
		if l, _ := s.List(ctx); len(l) != 1 || l[0].ID != "b" {
			t.Errorf("after Remove(a), List = %+v; want b alone", l)
		}
	})
}

// TestChangeAndRemoveAtRunTime: a change or removal made through another
// replica applies to a running scheduler within Config.Reload.
func TestChangeAndRemoveAtRunTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New(nil)
		rec := &recorder{}
		runner := replica(t, b, rec, schedule.Config{Reload: time.Second})
		admin := replica(t, b, &recorder{}, schedule.Config{})
		t0 := time.Now()
		set(t, admin, schedule.Entry{ID: "s", Spec: "@every 1s", Signature: task("s")})
		stop := run(runner)
		time.Sleep(5*time.Second + 500*time.Millisecond) // ticks 1..5
		set(t, admin, schedule.Entry{ID: "s", Spec: "@every 3s", Signature: task("s")})
		time.Sleep(10 * time.Second) // until 15.5: ticks 6 (before the reload at 6), 9, 12, 15
		if err := admin.Remove(context.Background(), "s"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		stop()
		got := rec.ticks(t, "s")
		want := append(seconds(t0, 1, 6), t0.Add(9*time.Second), t0.Add(12*time.Second), t0.Add(15*time.Second))
		if !equalTimes(got, want) {
			t.Fatalf("@every 1s, changed to @every 3s at 5.5s (reload 1s), removed at 15.5s: sent %v; want %v", got, want)
		}
	})
}

// TestRemoveStopsStaleReplica: a replica that has not reloaded since a
// schedule was removed cannot claim its ticks (the claim needs the
// schedule).
func TestRemoveStopsStaleReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New(nil)
		rec := &recorder{}
		runner := replica(t, b, rec, schedule.Config{Reload: time.Hour})
		admin := replica(t, b, &recorder{}, schedule.Config{})
		set(t, admin, schedule.Entry{ID: "s", Spec: "@every 1s", Signature: task("s")})
		stop := run(runner)
		time.Sleep(3*time.Second + 500*time.Millisecond)
		if err := admin.Remove(context.Background(), "s"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		stop()
		if got := rec.ticks(t, "s"); len(got) != 3 {
			t.Fatalf("removed at 3.5s, a replica reloading hourly sent %d ticks: %v; want 3", len(got), got)
		}
	})
}

// TestMissedPolicies: hourly ticks missed for three hours: Skip sends
// nothing until the next hour; RunOnce sends one catch-up at once.
func TestMissedPolicies(t *testing.T) {
	for _, policy := range []schedule.Missed{schedule.Skip, schedule.RunOnce} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memorybroker.New(nil)
				rec := &recorder{}
				s := replica(t, b, rec, schedule.Config{})
				t0 := time.Now() // midnight
				set(t, s, schedule.Entry{ID: "h", Spec: "@hourly", Signature: task("h"), Missed: policy})
				stop := run(s)
				time.Sleep(time.Hour + time.Minute) // 01:00 on time
				stop()
				time.Sleep(3*time.Hour + 10*time.Minute) // no scheduler: 02:00, 03:00, 04:00 missed
				restart := time.Now()
				stop = run(s)
				time.Sleep(time.Minute) // 04:11
				onStart := rec.ticks(t, "h")
				time.Sleep(time.Hour) // 05:00 on time
				stop()
				want := []time.Time{t0.Add(time.Hour)}
				if policy == schedule.RunOnce {
					want = append(want, t0.Add(4*time.Hour)) // one run, for the last tick missed
				}
				if !equalTimes(onStart, want) {
					t.Fatalf("%s: restarted at %v after missing 02:00-04:00, sent %v; want %v", policy, restart, onStart, want)
				}
				if got := rec.ticks(t, "h"); !equalTimes(got, append(want, t0.Add(5*time.Hour))) {
					t.Fatalf("%s: then sent %v; want 05:00 on time after %v", policy, got, want)
				}
			})
		})
	}
}

// TestReplicasNeverDoubleSend: three replicas on one broker, one starting
// late and one stopping early, send each tick once.
func TestReplicasNeverDoubleSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New(nil)
		rec := &recorder{}
		var rs []*schedule.Scheduler
		for range 3 {
			rs = append(rs, replica(t, b, rec, schedule.Config{Reload: 200 * time.Millisecond}))
		}
		t0 := time.Now()
		set(t, rs[0], schedule.Entry{ID: "s", Spec: "@every 1s", Signature: task("s")})
		set(t, rs[1], schedule.Entry{ID: "m", Spec: "* * * * *", Signature: task("m")})
		stop0, stop1 := run(rs[0]), run(rs[1])
		time.Sleep(10 * time.Second)
		stop2 := run(rs[2])
		time.Sleep(50 * time.Second)
		stop0()
		time.Sleep(2*time.Minute + 500*time.Millisecond)
		stop1()
		stop2()
		if got, want := rec.ticks(t, "s"), seconds(t0, 1, 180); !equalTimes(got, want) {
			t.Fatalf("three replicas, @every 1s for 180.5s: sent %d ticks; want each of 180 once (first differences: %v)", len(got), diff(got, want))
		}
		if got := rec.ticks(t, "m"); len(got) != 3 {
			t.Fatalf("three replicas, * * * * * for 3 minutes: sent %v; want 3", got)
		}
		ids := map[string]int{}
		for _, s := range rec.all() {
			ids[s.sig.UUID]++
		}
		for id, n := range ids {
			if n > 1 {
				t.Errorf("task %s sent %d times", id, n)
			}
		}
	})
}

func diff(got, want []time.Time) string {
	g := map[int64]int{}
	for _, t := range got {
		g[t.UnixMilli()]++
	}
	var out []string
	for _, w := range want {
		if g[w.UnixMilli()] != 1 {
			out = append(out, fmt.Sprintf("%v sent %d times", w.Format(time.TimeOnly), g[w.UnixMilli()]))
		}
	}
	return fmt.Sprint(out[:min(len(out), 5)])
}

// bareBroker is a broker without a schedule store.
type bareBroker struct{ errand.Broker }

func TestNewNeedsAStore(t *testing.T) {
	srv, err := errand.NewServer(errand.Config{Broker: bareBroker{memorybroker.New(nil)}, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := schedule.New(srv, schedule.Config{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New over a broker without a schedule store: %v; want errors.ErrUnsupported", err)
	}
}

func TestTickUUID(t *testing.T) {
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := schedule.TickUUID("s", tick), schedule.TickUUID("s", tick.In(time.FixedZone("x", 3600)))
	if a != b || len(a) != 36 || a[14] != '5' {
		t.Fatalf("TickUUID = %s, %s; want one version-5 UUID for one instant", a, b)
	}
	if schedule.TickUUID("s", tick.Add(time.Second)) == a || schedule.TickUUID("t", tick) == a {
		t.Fatalf("TickUUID repeats across ticks or schedules")
	}
}

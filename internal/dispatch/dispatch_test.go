package dispatch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sim runs a Policy against simulated fetch loops and tasks on a fake
// clock: each queue's loop fetches whenever the policy lets it, its fetch
// returns after latency(queue) with what its backlog holds (a fetch of an
// empty queue never returns), and each task runs for duration(queue).
type sim struct {
	t        *testing.T
	p        *Policy
	now      time.Time
	backlog  []int
	latency  func(q int) time.Duration
	duration func(q int) time.Duration

	inFetch []bool
	events  []event
	started []int // queue of each task started, in order
	running []int
	peak    []int
	asked   [][]int // each fetch's limit, per queue
}

type event struct {
	at     time.Time
	q      int
	n      int  // a fetch's deliveries
	finish bool // a task ends (else a fetch returns)
}

func newSim(t *testing.T, cfg Config, backlog []int, seed uint64, latency, duration func(r *rand.Rand, q int) time.Duration) *sim {
	r := rand.New(rand.NewPCG(seed, seed))
	s := &sim{t: t, p: New(cfg), now: time.Unix(1e9, 0), backlog: backlog,
		latency: func(q int) time.Duration { return latency(r, q) }, duration: func(q int) time.Duration { return duration(r, q) },
		inFetch: make([]bool, len(cfg.Queues)), running: make([]int, len(cfg.Queues)), peak: make([]int, len(cfg.Queues)), asked: make([][]int, len(cfg.Queues))}
	return s
}

// run advances the simulation until n tasks have started or nothing is
// left to happen.
func (s *sim) run(n int) {
	for len(s.started) < n {
		for q := range s.backlog {
			if s.inFetch[q] {
				continue
			}
			limit, ok := s.p.Fetch(q, s.now)
			if !ok {
				continue
			}
			s.inFetch[q] = true
			s.asked[q] = append(s.asked[q], limit)
			got := min(limit, s.backlog[q])
			if got == 0 {
				continue // blocks: the queue is empty
			}
			s.backlog[q] -= got
			s.push(event{at: s.now.Add(s.latency(q)), q: q, n: got})
		}
		var wake time.Time
		for {
			q, w := s.p.Next(s.now)
			if q < 0 {
				wake = w
				break
			}
			s.started = append(s.started, q)
			s.running[q]++
			s.peak[q] = max(s.peak[q], s.running[q])
			if total := sum(s.running); total > s.p.cfg.Slots {
				s.t.Fatalf("%d tasks running with %d slots", total, s.p.cfg.Slots)
			}
			s.push(event{at: s.now.Add(s.duration(q)), q: q, finish: true})
		}
		if len(s.events) == 0 && wake.IsZero() {
			return
		}
		if len(s.events) == 0 || (!wake.IsZero() && wake.Before(s.events[0].at)) {
			if !wake.After(s.now) {
				s.t.Fatalf("Next asked to be called again at %v, not after now (%v)", wake, s.now)
			}
			s.now = wake
			continue
		}
		e := s.events[0]
		s.events = s.events[1:]
		s.now = e.at
		if e.finish {
			s.running[e.q]--
			s.p.Finished(e.q)
		} else {
			s.inFetch[e.q] = false
			s.p.Fetched(e.q, e.n, false, s.now)
		}
	}
}

func (s *sim) push(e event) {
	i, _ := slices.BinarySearchFunc(s.events, e.at, func(a event, t time.Time) int {
		if a.at.After(t) {
			return 1
		}
		return -1 // equal times keep their order of arrival
	})
	s.events = slices.Insert(s.events, i, e)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func counts(started []int, queues int) []int {
	out := make([]int, queues)
	for _, q := range started {
		out[q]++
	}
	return out
}

func uniform(lo, hi time.Duration) func(r *rand.Rand, q int) time.Duration {
	return func(r *rand.Rand, q int) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
}

// Under a backlog on every queue, the tasks started follow the weights
// however long each queue's fetches take (below Patience): a slot the
// policy picked for a slow queue waits for its fetch and is never taken
// by a faster queue's delivery. Measured over the first 400 starts: off
// by at most the slots that may be owed at the moment of counting.
func TestWeightsHoldWhateverFetchLatency(t *testing.T) {
	type latencies struct {
		name string
		f    func(r *rand.Rand, q int) time.Duration
	}
	slowFirst := func(r *rand.Rand, q int) time.Duration {
		if q == 0 {
			return uniform(0, 900*time.Millisecond)(r, q)
		}
		return uniform(0, 2*time.Millisecond)(r, q)
	}
	slowLast := func(r *rand.Rand, q int) time.Duration {
		if q == 0 {
			return uniform(0, 2*time.Millisecond)(r, q)
		}
		return uniform(0, 900*time.Millisecond)(r, q)
	}
	for _, weights := range [][]int{{3, 1}, {6, 3, 1}, {1, 1}} {
		for _, slots := range []int{1, 2, 4, 20} {
			for _, lat := range []latencies{{"heaviest-slow", slowFirst}, {"lightest-slow", slowLast}, {"all-random", uniform(0, 900*time.Millisecond)}} {
				for seed := range uint64(5) {
					name := fmt.Sprintf("%v/slots-%d/%s/seed-%d", weights, slots, lat.name, seed)
					t.Run(name, func(t *testing.T) {
						cfg := Config{Slots: slots}
						backlog := make([]int, len(weights))
						total := 0
						for i, w := range weights {
							cfg.Queues = append(cfg.Queues, Queue{Name: fmt.Sprint("q", i), Weight: w})
							backlog[i] = 10_000
							total += w
						}
						const n = 400
						s := newSim(t, cfg, backlog, seed, lat.f, uniform(0, 5*time.Millisecond))
						s.run(n)
						got := counts(s.started[:n], len(weights))
						for i, w := range weights {
							want := n * w / total
							if d := got[i] - want; d < -slots || d > slots {
								t.Errorf("weights promise broken: of the first %d tasks started, queue %d (weight %d of %d) had %d, want %d ± %d (the slots); all: %v",
									n, i, w, total, got[i], want, slots, got)
							}
						}
					})
				}
			}
		}
	}
}

// The picks interleave (smooth weighted round robin): 6:3:1 starts
// 0,1,0,2,0,1,0,... rather than six of the first queue in a row.
func TestWeightsInterleave(t *testing.T) {
	cfg := Config{Slots: 1, Queues: []Queue{{Name: "a", Weight: 5}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}}
	s := newSim(t, cfg, []int{1000, 1000, 1000}, 1, uniform(0, 0), uniform(time.Millisecond, time.Millisecond))
	s.run(14)
	want := []int{0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0}
	if !slices.Equal(s.started, want) {
		t.Errorf("smooth weighted round robin: started %v, want %v (nginx's order for 5:1:1)", s.started, want)
	}
}

// Under Strict, a lower queue starts nothing while a higher one has a
// backlog, however slow the higher queue's fetches and fast the lower's.
func TestStrictWhateverFetchLatency(t *testing.T) {
	for _, slots := range []int{1, 2, 4} {
		for seed := range uint64(10) {
			t.Run(fmt.Sprintf("slots-%d/seed-%d", slots, seed), func(t *testing.T) {
				const hi = 50
				cfg := Config{Slots: slots, Strict: true, Queues: []Queue{{Name: "hi", Weight: 2}, {Name: "lo", Weight: 1}}}
				lat := func(r *rand.Rand, q int) time.Duration {
					if q == 0 {
						return uniform(0, 900*time.Millisecond)(r, q)
					}
					return 0
				}
				s := newSim(t, cfg, []int{hi, 1000}, seed, lat, uniform(0, 3*time.Millisecond))
				s.run(hi + 10)
				if k := slices.Index(s.started, 1); k >= 0 && k < hi {
					t.Errorf("strict priority promise broken: a task of the lower queue started %d-th, before the %d of the higher one had all started: %v", k+1, hi, s.started)
				}
				if got := counts(s.started, 2); got[1] == 0 {
					t.Errorf("strict priority: the lower queue never ran once the higher one was empty: %v", got)
				}
			})
		}
	}
}

// A queue's cap holds while the other queues use the rest of the slots.
func TestCapsHold(t *testing.T) {
	for seed := range uint64(10) {
		cfg := Config{Slots: 4, Queues: []Queue{{Name: "capped", Weight: 5, Cap: 1}, {Name: "free", Weight: 1}}}
		s := newSim(t, cfg, []int{500, 500}, seed, uniform(0, 50*time.Millisecond), uniform(0, 20*time.Millisecond))
		s.run(600)
		if s.peak[0] > 1 {
			t.Errorf("seed %d: per-queue cap broken: %d tasks of the queue capped at 1 ran at once", seed, s.peak[0])
		}
		if s.peak[1] < 3 {
			t.Errorf("seed %d: the uncapped queue ran at most %d at once with 4 slots and the other capped at 1; want 3", seed, s.peak[1])
		}
		for _, as := range s.asked[0] {
			if as > 2 {
				t.Errorf("seed %d: the queue capped at 1 fetched %d at once; want its cap and the probe, 2", seed, as)
			}
		}
	}
}

// An empty queue holds no slot for longer than its patience: with one
// slot, a worker on an empty queue weighted 10 and a busy one weighted 1
// starts the busy queue's first task after Patience (nothing is known of
// the empty one yet), and the rest one after another.
func TestEmptyQueueGoesDry(t *testing.T) {
	cfg := Config{Slots: 1, Queues: []Queue{{Name: "empty", Weight: 10}, {Name: "busy", Weight: 1}}}
	var starts []time.Time
	s := newSim(t, cfg, []int{0, 50}, 1, uniform(time.Millisecond, time.Millisecond), uniform(time.Millisecond, time.Millisecond))
	begin := s.now
	for n := 1; n <= 50; n++ {
		s.run(n)
		starts = append(starts, s.now)
	}
	if d := starts[0].Sub(begin); d < DefaultPatience || d > DefaultPatience+10*time.Millisecond {
		t.Errorf("the first task of the busy queue started after %v; want the empty queue's patience, %v", d, DefaultPatience)
	}
	if d := starts[49].Sub(starts[0]); d > 200*time.Millisecond {
		t.Errorf("49 more tasks of the busy queue took %v beside a dry empty queue; want about 49 task durations", d)
	}
}

// A queue whose last fetch returned fewer than it asked (it ran out) is
// waited for only a short grace, not Patience.
func TestRanOutQueueWaitedForBriefly(t *testing.T) {
	for _, strict := range []bool{false, true} {
		p := New(Config{Slots: 1, Strict: strict, Queues: []Queue{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}}})
		now := time.Unix(1e9, 0)
		la, _ := p.Fetch(0, now)
		p.Fetch(1, now)
		if la != 2 {
			t.Fatalf("first fetch of a with one slot asks %d; want its share (1) and the probe", la)
		}
		now = now.Add(10 * time.Millisecond)
		p.Fetched(0, 1, false, now) // fewer than asked: a ran out
		p.Fetched(1, 2, false, now)
		if q, _ := p.Next(now); q != 0 {
			t.Fatalf("Next = %d, want queue a (weight 3, a delivery in hand)", q)
		}
		p.Fetch(0, now) // a's next fetch blocks: a is empty
		p.Finished(0)
		q, wake := p.Next(now)
		if q >= 0 || wake.IsZero() {
			t.Fatalf("Next = %d, %v; want the slot owed to a's fetch, with a wake-up", q, wake)
		}
		want := MaxGrace
		if !strict {
			want = 2 * 10 * time.Millisecond // twice the fetch time seen
		}
		if d := wake.Sub(now); d != want {
			t.Errorf("strict=%v: a queue that ran out is waited for %v; want %v", strict, d, want)
		}
		if q, _ := p.Next(wake); q != 1 {
			t.Errorf("strict=%v: after the grace, Next = %d; want queue b", strict, q)
		}
	}
}

// A failed fetch makes its queue dry at once: its owed slots go to the
// others.
func TestFailedFetchFreesOwedSlots(t *testing.T) {
	p := New(Config{Slots: 2, Queues: []Queue{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}})
	now := time.Unix(1e9, 0)
	p.Fetch(0, now)
	p.Fetch(1, now)
	p.Fetched(1, 3, false, now)
	var got []int
	for {
		q, _ := p.Next(now)
		if q < 0 {
			break
		}
		got = append(got, q)
	}
	if !slices.Equal(got, []int{1}) || p.Owed(0) != 1 {
		t.Fatalf("dispatched %v with a owing %d; want b once and one slot owed to a's fetch", got, p.Owed(0))
	}
	p.Fetched(0, 0, true, now)
	if q, _ := p.Next(now); q != 1 || p.Owed(0) != 0 {
		t.Errorf("after a's fetch failed: Next = %d, a owes %d; want b and nothing owed", q, p.Owed(0))
	}
}

// A stopped (paused) queue is not waited for.
func TestStoppedQueueNotWaitedFor(t *testing.T) {
	p := New(Config{Slots: 1, Queues: []Queue{{Name: "a", Weight: 5}, {Name: "b", Weight: 1}}})
	now := time.Unix(1e9, 0)
	p.Fetch(0, now)
	p.Fetch(1, now)
	p.Fetched(1, 1, false, now)
	if q, _ := p.Next(now); q >= 0 || p.Owed(0) != 1 {
		t.Fatalf("Next = %d, a owes %d; want the slot owed to a", q, p.Owed(0))
	}
	p.Stop(0)
	if q, _ := p.Next(now); q != 1 {
		t.Errorf("with a stopped, Next = %d; want b", q)
	}
	if _, ok := p.Fetch(0, now); !ok {
		t.Errorf("a stopped queue may fetch again once its loop asks")
	}
}

// Fetch asks for the queue's share of the free slots by weight, at least
// 1, plus one (the probe that tells a backlog from a queue running out).
func TestFetchLimit(t *testing.T) {
	p := New(Config{Slots: 10, Queues: []Queue{{Name: "a", Weight: 6}, {Name: "b", Weight: 3}, {Name: "c", Weight: 1}}})
	now := time.Unix(1e9, 0)
	var got []int
	for i := range 3 {
		n, ok := p.Fetch(i, now)
		if !ok {
			t.Fatalf("queue %d may not fetch at start", i)
		}
		got = append(got, n)
	}
	if !slices.Equal(got, []int{7, 4, 2}) {
		t.Errorf("fetch limits %v; want each queue's share of 10 slots by 6:3:1, plus one: [7 4 2]", got)
	}
	p.Fetched(0, 7, false, now)
	if _, ok := p.Fetch(0, now); ok {
		t.Errorf("a queue with deliveries in hand fetched again")
	}
}

// After Start, a slot picked for a queue whose loop has not fetched yet
// waits for it: a faster queue's deliveries do not take its turns.
func TestStartWaitsForEveryFirstFetch(t *testing.T) {
	p := New(Config{Slots: 4, Queues: []Queue{{Name: "slow", Weight: 3}, {Name: "fast", Weight: 1}}})
	now := time.Unix(1e9, 0)
	p.Start(now)
	p.Fetch(1, now)
	p.Fetched(1, 2, false, now) // the fast queue's loop ran first
	var got []int
	for {
		q, _ := p.Next(now)
		if q < 0 {
			break
		}
		got = append(got, q)
	}
	if !slices.Equal(got, []int{1}) || p.Owed(0) != 3 {
		t.Fatalf("before the slow queue's first fetch began: dispatched %v, slow owed %d; want the fast queue once (its weight) and three slots owed to the slow one", got, p.Owed(0))
	}
	p.Fetch(0, now.Add(time.Millisecond))
	p.Fetched(0, 4, false, now.Add(300*time.Millisecond))
	for range 3 {
		if q, _ := p.Next(now.Add(300 * time.Millisecond)); q != 0 {
			t.Fatalf("the slow queue's fetch returned: Next = %d, want its owed slots filled first", q)
		}
	}
}

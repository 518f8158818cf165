// Package dispatch is the policy that shares a worker's slots among its
// queues: by weight (smooth weighted round robin), or by strict priority,
// within each queue's cap. It is a pure state machine: it makes no call,
// starts no goroutine and reads no clock (every method that needs the time
// takes it), so it is tested without a broker and without waiting.
//
// # The model
//
// Each queue has a fetch loop that fetches into the queue's hand, and
// the worker has Slots slots. The policy decides, for each free slot in
// turn, which queue it serves. A queue may be picked when it has a
// delivery in hand, or when it is live: its fetch is under way and it is
// believed to have work. A slot picked for a live queue with an empty hand
// is owed to it: it waits for that queue's fetch, and no other queue's
// delivery takes it, however much sooner that one arrives. So the order of
// the picks, and with it the share of each queue, does not depend on how
// long any fetch takes.
//
// A queue stops being live (it is dry) when a fetch of it fails, or when
// its fetch has been under way longer than its patience: Patience when
// its last fetch returned every delivery it asked for (a backlog: the next
// one will most likely find more) or when none has returned yet, and a
// short grace when its last fetch returned fewer (it ran out: the next
// fetch most likely waits for a publish). A dry queue's owed slots are
// freed, and its picks refunded; it is live again once a fetch of it
// returns deliveries. A fetch asks for one more delivery than the queue's
// share (Fetch), so that "every delivery it asked for" means the queue
// held more than the share.
//
// Methods are not safe for concurrent use: the caller holds one lock
// around every call.
package dispatch

import (
	"time"
)

// Grace bounds: how long an owed slot waits for a queue whose last fetch
// ran it out (not a backlog), as twice its recent fetch time within these
// bounds; MaxGrace under Strict.
const (
	MinGrace = 5 * time.Millisecond
	MaxGrace = 100 * time.Millisecond
)

// DefaultPatience is Config.Patience's default.
const DefaultPatience = time.Second

// Queue is one queue of a worker.
type Queue struct {
	Name   string
	Weight int // 1 or more
	Cap    int // most tasks of the queue at once; 0: no cap but Slots
}

// Config configures a Policy.
type Config struct {
	// Slots is how many tasks run at once (1 or more).
	Slots int
	// Queues, in the order ties are broken in (the caller sorts them,
	// highest weight first).
	Queues []Queue
	// Strict: a slot goes to the live queue of highest weight, never by
	// credit.
	Strict bool
	// Patience is how long an owed slot waits for the fetch of a queue
	// that has a backlog (see the package doc). Default: DefaultPatience.
	Patience time.Duration
}

type queue struct {
	Queue
	hand    int // fetched, not yet dispatched
	running int // dispatched, not yet finished
	owed    int // slots picked for the queue, waiting for its fetch
	credit  int // smooth weighted round robin

	fetching bool      // a fetch is under way, or about to be
	fetchAt  time.Time // when it began
	asked    int       // what it asked for
	stopped  bool      // the fetch loop is not fetching (a paused queue)
	seen     bool      // a fetch has returned deliveries
	full     bool      // the last one returned every delivery it asked for
	dry      bool      // a fetch failed or outlasted the queue's patience
	rtt      time.Duration
}

// Policy is the dispatch state of one worker.
type Policy struct {
	cfg   Config
	qs    []*queue
	total int // sum of the weights
}

// New returns the policy for cfg: nothing fetched, and no queue live
// until its loop fetches (or Start).
func New(cfg Config) *Policy {
	if cfg.Patience <= 0 {
		cfg.Patience = DefaultPatience
	}
	cfg.Slots = max(cfg.Slots, 1)
	p := &Policy{cfg: cfg}
	for _, q := range cfg.Queues {
		q.Weight = max(q.Weight, 1)
		p.qs = append(p.qs, &queue{Queue: q})
		p.total += q.Weight
	}
	return p
}

// Start says every queue's first fetch is about to begin, now: until it
// has, a slot picked for the queue waits for it, so a queue whose loop is
// slower to start loses no turn to a faster one.
func (p *Policy) Start(now time.Time) {
	for _, q := range p.qs {
		if !q.stopped && !q.fetching {
			q.fetching, q.fetchAt = true, now
		}
	}
}

// Fetch reports whether queue i's fetch loop fetches now, and for how
// many deliveries: when its hand is empty, it is not stopped and it is
// below its cap (or owed slots). The fetch counts as under way from now
// (or from the moment the queue's hand ran empty, if that was later than
// its last fetch's return). limit is one more than the queue's share:
// the most of its owed slots and its share by weight of the slots neither
// running nor owed nor matched by a delivery in hand (at least 1), within
// its cap.
func (p *Policy) Fetch(i int, now time.Time) (limit int, ok bool) {
	q := p.qs[i]
	q.stopped = false
	if q.hand > 0 || (q.owed == 0 && !p.capRoom(q)) {
		q.fetching = false
		return 0, false
	}
	free := p.cfg.Slots
	for _, o := range p.qs {
		free -= o.running + o.hand + o.owed
	}
	n := max(1, free*q.Weight/p.total, q.owed)
	if q.Cap > 0 {
		n = min(n, max(q.Cap-q.running, 1))
	}
	if !q.fetching {
		q.fetching, q.fetchAt = true, now
	}
	q.asked = n + 1
	return q.asked, true
}

// Stop says queue i's fetch loop stopped fetching (its queue is paused):
// the queue is not live until it fetches again, and its owed slots go to
// the others.
func (p *Policy) Stop(i int) {
	q := p.qs[i]
	q.stopped, q.fetching = true, false
}

// Fetched records what a fetch of queue i returned: n deliveries, now in
// its hand, and whether it failed. A failed fetch that returned nothing
// makes the queue dry.
func (p *Policy) Fetched(i int, n int, failed bool, now time.Time) {
	q := p.qs[i]
	q.fetching = false
	q.hand += n
	switch {
	case n > 0:
		q.dry, q.seen, q.full = false, true, n >= q.asked
		// The round trip of a fetch that found deliveries at once; a
		// longer one waited for a publish, which says nothing of it.
		if d := now.Sub(q.fetchAt); d < MaxGrace {
			if q.rtt == 0 {
				q.rtt = d
			}
			q.rtt = (3*q.rtt + d) / 4
		}
	case failed:
		q.dry = true
	}
}

// Finished frees the slot of a task of queue i that ended.
func (p *Policy) Finished(i int) {
	p.qs[i].running--
}

// Next decides what the next free slot does. With i >= 0, the caller
// dispatches the first delivery of queue i's hand, then calls Next again.
// With i < 0, there is nothing to dispatch now; wake, when not zero, is
// when to call Next again (an owed slot's wait runs out then), else the
// next call is due on the next event (a fetch returned, a task finished).
func (p *Policy) Next(now time.Time) (i int, wake time.Time) {
	for {
		// Owed slots first, in queue order: they were decided earlier.
		for i, q := range p.qs {
			if q.owed > 0 && q.hand > 0 {
				q.owed--
				p.dispatch(q, now)
				return i, time.Time{}
			}
		}
		free := p.cfg.Slots
		for _, q := range p.qs {
			if q.owed > 0 && !p.live(q, now) {
				p.release(q)
			}
			free -= q.running + q.owed
		}
		if free <= 0 {
			return -1, p.wake()
		}
		best := -1
		for i, q := range p.qs {
			if !p.capRoom(q) || (q.hand == 0 && !p.live(q, now)) {
				continue
			}
			if best < 0 || p.prefer(q, p.qs[best]) {
				best = i
			}
		}
		if best < 0 {
			return -1, p.wake()
		}
		q := p.qs[best]
		p.pick(q)
		if q.hand > 0 {
			p.dispatch(q, now)
			return best, time.Time{}
		}
		q.owed++
	}
}

// Hand is how many deliveries queue i has in hand.
func (p *Policy) Hand(i int) int { return p.qs[i].hand }

// Running is how many tasks of queue i run.
func (p *Policy) Running(i int) int { return p.qs[i].running }

// Owed is how many slots wait for queue i's fetch.
func (p *Policy) Owed(i int) int { return p.qs[i].owed }

// dispatch moves one delivery of q's hand to a slot. A hand left empty
// makes the queue fetching from now, if it may fetch: its loop is woken
// by the caller, and the next slot picked for it waits for that fetch.
func (p *Policy) dispatch(q *queue, now time.Time) {
	q.hand--
	q.running++
	if q.hand == 0 && !q.stopped && !q.fetching && (p.capRoom(q) || q.owed > 0) {
		q.fetching, q.fetchAt = true, now
	}
}

// capRoom reports whether q may take one more slot.
func (p *Policy) capRoom(q *queue) bool {
	return q.Cap == 0 || q.running+q.owed < q.Cap
}

// live reports whether a slot may wait for q's fetch: one is under way and
// has lasted less than q's patience. A fetch that outlasted it makes q dry.
func (p *Policy) live(q *queue, now time.Time) bool {
	if q.dry || !q.fetching {
		return false
	}
	if now.Sub(q.fetchAt) >= p.patience(q) {
		q.dry = true
		return false
	}
	return true
}

// patience is how long a slot waits for q's fetch under way.
func (p *Policy) patience(q *queue) time.Duration {
	if !q.seen || q.full {
		return p.cfg.Patience
	}
	if p.cfg.Strict || q.rtt == 0 {
		return MaxGrace
	}
	return min(max(2*q.rtt, MinGrace), MaxGrace)
}

// wake is when the first owed slot's wait runs out (zero: none owed).
func (p *Policy) wake() time.Time {
	var at time.Time
	for _, q := range p.qs {
		if q.owed == 0 || !q.fetching {
			continue
		}
		if t := q.fetchAt.Add(p.patience(q)); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// prefer reports whether the policy picks q over o: the higher weight
// under Strict, else the higher credit of smooth weighted round robin
// (nginx's): each pick adds every queue's weight to its credit and takes
// the sum of weights from the picked queue's, so picks follow the
// weights and interleave.
func (p *Policy) prefer(q, o *queue) bool {
	if p.cfg.Strict {
		return q.Weight > o.Weight
	}
	return q.credit+q.Weight > o.credit+o.Weight
}

// pick charges q for one slot.
func (p *Policy) pick(q *queue) {
	for _, o := range p.qs {
		o.credit += o.Weight
		if o == q {
			o.credit -= p.total
		}
		p.bound(o)
	}
}

// release frees q's owed slots and refunds their picks: q is dry.
func (p *Policy) release(q *queue) {
	for range q.owed {
		for _, o := range p.qs {
			o.credit -= o.Weight
			if o == q {
				o.credit += p.total
			}
			p.bound(o)
		}
	}
	q.owed = 0
}

// bound keeps a credit within one round of the weights, so a queue idle
// for long does not take every slot when it comes back, nor one busy alone
// lose its turns.
func (p *Policy) bound(q *queue) {
	q.credit = min(max(q.credit, -p.total), p.total)
}

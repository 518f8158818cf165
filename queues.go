package errand

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
)

// Several queues per worker (WorkerConfig.Queues): one fetch loop per
// queue, and a dispatcher that hands the worker's Concurrency slots to
// the queues by weight (smooth weighted round robin) or strict priority,
// within each queue's QueueConcurrency cap.
//
// The fetch loops do not hold slots while they wait in Fetch: a loop
// fetches at most max(1, its fair share of the free slots) deliveries into
// its queue's hand and fetches again only once the hand is empty. The
// dispatcher gives each free slot to the queue chosen among those with a
// delivery in hand, so under a full backlog the tasks started follow the
// weights exactly, and a queue whose Fetch blocks (it is empty) holds no
// slot idle. The price is a bounded prefetch: a delivery may wait in a
// hand (its lease extended from the moment it is fetched) beyond the free
// slots, at most one fetch per queue. A queue whose last fetch returned
// messages and whose next fetch is under way is waited for, briefly
// (twice its recent fetch time, between reserveMin and reserveMax), so
// that a fetch's round trip does not hand its turn to another queue.
// Under StrictPriority it is waited for reserveMax whatever its recent
// fetch time: one slow round trip of a busy higher queue (a loaded server)
// must not let a lower queue in; the price is that a lower queue waits up
// to reserveMax once when the higher one runs dry.

// Bounds of the wait for a busy queue's fetch (see above).
const (
	reserveMin = 5 * time.Millisecond
	reserveMax = 100 * time.Millisecond
)

// workerQueue is one queue of a worker with its share of the slots. The
// fields below pause are guarded by Worker.amu.
type workerQueue struct {
	name   string
	weight int
	cap    int // most tasks running at once; 0: Concurrency
	pause  *pauseFlag
	kick   chan struct{} // wakes the queue's fetch loop

	hand     []job     // fetched, waiting for a slot
	fetching bool      // a Fetch is under way
	fetchAt  time.Time // when it began
	busy     bool      // the last Fetch returned messages
	rtt      time.Duration
	running  int // tasks running (dispatched, not yet finished)
	credit   int // smooth weighted round robin
}

// job is one delivery on its way to a runner; q is its queue in a
// multi-queue worker (nil otherwise), stop its lease extender when it was
// started at fetch time.
type job struct {
	d    *driver.Delivery
	q    *workerQueue
	stop func() func()
}

// Validate reports what is wrong with cfg's queues: a weight below 1, a
// negative cap, a cap for a queue the worker does not consume, an empty
// queue name, or a Queue that Queues does not include.
func (cfg WorkerConfig) Validate() error {
	var errs []error
	for q, wt := range cfg.Queues {
		if q == "" {
			errs = append(errs, errors.New("errand: WorkerConfig.Queues: empty queue name"))
		}
		if wt < 1 {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.Queues: queue %q has weight %d; weights are 1 or more", q, wt))
		}
	}
	if cfg.Queue != "" && len(cfg.Queues) > 0 {
		if _, ok := cfg.Queues[cfg.Queue]; !ok {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.Queue %q is not among WorkerConfig.Queues; name it there with its weight (or set only one of the two)", cfg.Queue))
		}
	}
	for q, c := range cfg.QueueConcurrency {
		if c < 0 {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.QueueConcurrency: queue %q has cap %d; caps are 0 (none) or more", q, c))
		}
		_, inQueues := cfg.Queues[q]
		if !inQueues && (len(cfg.Queues) > 0 || (cfg.Queue != "" && q != cfg.Queue)) {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.QueueConcurrency names queue %q, which the worker does not consume", q))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// workerQueues returns cfg's queues, highest weight first (then by name),
// and whether they need the multi-queue loop: more than one queue, or a
// cap. cfg.Queue has its default.
func workerQueues(cfg WorkerConfig) ([]*workerQueue, bool) {
	var qs []*workerQueue
	add := func(name string, weight int) {
		// busy until a fetch shows otherwise, so that the first slots wait
		// for the first fetch of a queue the policy prefers.
		qs = append(qs, &workerQueue{name: name, weight: weight, cap: cfg.QueueConcurrency[name],
			pause: &pauseFlag{}, kick: make(chan struct{}, 1), busy: true})
	}
	if len(cfg.Queues) == 0 {
		add(cfg.Queue, 1)
	}
	for name, wt := range cfg.Queues {
		add(name, wt)
	}
	slices.SortFunc(qs, func(a, b *workerQueue) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	multi := len(qs) > 1
	for _, q := range qs {
		if q.cap > 0 && q.cap < cfg.Concurrency {
			multi = true
		}
	}
	return qs, multi
}

// queueNames are the worker's queues, highest weight first.
func (w *Worker) queueNames() []string {
	out := make([]string, len(w.queues))
	for i, q := range w.queues {
		out[i] = q.name
	}
	return out
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// loopQueues runs one fetch loop per queue and the dispatcher until
// fetching stops, then gives back what is still in hand.
func (w *Worker) loopQueues() {
	defer close(w.loopDone)
	defer close(w.work)
	w.pollPause() // a worker starting on a paused queue fetches nothing from it
	w.amu.Lock()
	for _, q := range w.queues {
		q.fetching, q.fetchAt = true, time.Now() // the first fetch, about to begin
	}
	w.amu.Unlock()
	var fetchers sync.WaitGroup
	for _, q := range w.queues {
		fetchers.Go(func() { w.fetchQueue(q) })
	}
	w.dispatch()
	fetchers.Wait()
	var left []job
	w.amu.Lock()
	for _, q := range w.queues {
		left = append(left, q.hand...)
		q.hand = nil
	}
	w.amu.Unlock()
	ds := make([]*driver.Delivery, 0, len(left))
	for _, j := range left {
		j.stop()()
		ds = append(ds, j.d)
	}
	w.giveBack(ds)
}

// fetchQueue fills q's hand whenever it is empty, q is not paused and
// below its cap.
func (w *Worker) fetchQueue(q *workerQueue) {
	b := w.srv.broker
	failures := 0
	for {
		if resumed := q.pause.wait(); resumed != nil {
			w.amu.Lock()
			q.fetching = false
			w.amu.Unlock()
			select {
			case <-resumed:
				continue
			case <-w.fetchCtx.Done():
				return
			}
		}
		w.amu.Lock()
		ready := len(q.hand) == 0 && (q.cap == 0 || q.running < q.cap)
		limit := 0
		if ready {
			limit = w.fetchLimit(q)
			if !q.fetching {
				q.fetching, q.fetchAt = true, time.Now()
			}
		}
		w.amu.Unlock()
		if !ready {
			select {
			case <-q.kick:
				continue
			case <-w.fetchCtx.Done():
				return
			}
		}
		ds, err := b.Fetch(w.fetchCtx, q.name, limit, w.cfg.Lease)
		if !w.fetched(q, ds, err, &failures) {
			return
		}
	}
}

// fetchLimit is how many deliveries q's fetch asks for: its fair share
// (by weight) of the slots neither running nor promised to a hand, at
// least 1, within its cap. Under w.amu.
func (w *Worker) fetchLimit(q *workerQueue) int {
	free, total := w.cfg.Concurrency, 0
	for _, o := range w.queues {
		free -= o.running + len(o.hand)
		total += o.weight
	}
	n := max(1, free*q.weight/total)
	if q.cap > 0 {
		n = min(n, q.cap-q.running)
	}
	return max(n, 1)
}

// fetched puts what q's fetch returned in its hand, or backs off after an
// error. It reports false when the loop must end.
func (w *Worker) fetched(q *workerQueue, ds []*driver.Delivery, err error, failures *int) bool {
	if len(ds) > 0 && q.pause.on() {
		w.giveBack(ds) // paused while the fetch waited: give them back untouched
		ds = nil
	}
	jobs := make([]job, len(ds))
	for i, d := range ds {
		if d.Queue == "" {
			d.Queue = q.name
		}
		jobs[i] = job{d: d, q: q, stop: w.extendLease(d)} // the lease runs while it waits in hand
	}
	w.amu.Lock()
	q.fetching = false
	if len(ds) > 0 {
		q.busy = true
		// The round trip of a fetch that found messages at once; a longer
		// one waited for a publish, which says nothing of the round trip.
		if d := time.Since(q.fetchAt); d < reserveMax {
			if q.rtt == 0 {
				q.rtt = d
			}
			q.rtt = (3*q.rtt + d) / 4
		}
	} else if err != nil {
		q.busy = false
	}
	q.hand = append(q.hand, jobs...)
	w.amu.Unlock()
	kick(w.kick)
	if err == nil {
		*failures = 0
		return true
	}
	if w.fetchCtx.Err() != nil {
		return false
	}
	*failures++
	w.report(err, "errand: fetch failed", "queue", q.name, "failures_in_a_row", *failures)
	if errors.Is(err, ErrClosed) {
		return false
	}
	t := time.NewTimer(w.backoff(*failures))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.fetchCtx.Done():
		return false
	}
}

// dispatch gives free slots to the queues' hands until fetching stops.
func (w *Worker) dispatch() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := w.grant()
		timer.Stop()
		var tc <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-w.kick:
		case <-tc:
		case <-w.fetchCtx.Done():
			return
		}
	}
}

// grant hands free slots to queues, one at a time, each to the queue the
// policy picks among those that can take it; it returns how long to wait
// for a busy queue's fetch the policy picked (0: nothing to wait for).
func (w *Worker) grant() time.Duration {
	w.amu.Lock()
	defer w.amu.Unlock()
	for {
		now := time.Now()
		var best *workerQueue
		var wait time.Duration
		for _, q := range w.queues {
			if q.cap > 0 && q.running >= q.cap {
				continue
			}
			var left time.Duration
			if len(q.hand) == 0 {
				if !q.fetching || !q.busy {
					continue
				}
				grace := reserveMax // no fetch timed yet, or strict priority
				if q.rtt > 0 && !w.cfg.StrictPriority {
					grace = min(max(2*q.rtt, reserveMin), reserveMax)
				}
				left = grace - now.Sub(q.fetchAt)
				if left <= 0 {
					continue // its fetch is waiting: the queue is empty
				}
			}
			if best == nil || w.prefer(q, best) {
				best, wait = q, left
			}
		}
		if best == nil {
			return 0
		}
		if len(best.hand) == 0 {
			return wait
		}
		select {
		case w.slots <- struct{}{}:
		default:
			return 0 // no free slot
		}
		j := best.hand[0]
		best.hand = best.hand[1:]
		best.running++
		total := 0
		for _, q := range w.queues {
			total += q.weight
		}
		for _, q := range w.queues {
			q.credit += q.weight
			if q == best {
				q.credit -= total
			}
			// Bounded, so a queue idle for long does not take every slot
			// when it comes back, nor one busy alone lose its turns.
			q.credit = min(max(q.credit, -total), total)
		}
		if len(best.hand) == 0 {
			// Its fetcher is woken to fetch again: from now on the queue
			// counts as fetching, so the next slot waits for it.
			best.fetching, best.fetchAt = true, now
			kick(best.kick)
		}
		w.tasks.Add(1)
		w.work <- j // never blocks: a slot is held for each job
	}
}

// prefer reports whether the policy picks q over o: the higher weight
// under StrictPriority, else the higher credit of smooth weighted round
// robin (nginx's): each pick adds every queue's weight to its credit and
// takes the sum of weights from the picked queue's, so picks follow the
// weights and interleave.
func (w *Worker) prefer(q, o *workerQueue) bool {
	if w.cfg.StrictPriority {
		return q.weight > o.weight
	}
	return q.credit+q.weight > o.credit+o.weight
}

// finished frees the slot of a task of q that ended.
func (w *Worker) finished(q *workerQueue) {
	w.amu.Lock()
	q.running--
	w.amu.Unlock()
	kick(q.kick)
	kick(w.kick)
}

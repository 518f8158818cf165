package errand

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/dispatch"
)

// The fetch loop: one per queue (fetchQueue), the same code for one
// queue or several; what differs is who decides how many deliveries a
// fetch asks for and which delivery a free slot goes to.
//
// One queue: the loop takes every free slot (at least one, waiting for
// it) and fetches that many, holding the slots while it fetches, and
// hands each delivery straight to a runner: a worker on one queue never
// fetches beyond its free slots, and a task its fetch started
// (colocation.go, FetchStart) reaches its runner at once. A cap
// (QueueConcurrency) below Concurrency is then the worker's slot count.
//
// Several queues: a dispatcher hands the worker's Concurrency slots to
// the queues as the policy (internal/dispatch) decides: by weight
// (smooth weighted round robin) or strict priority, within each queue's
// QueueConcurrency cap. The loops do not hold slots while they wait in
// Fetch (a loop waiting on an empty queue would hold them idle while
// another queue has work): a loop fetches its share of the free slots
// (and one more) into its queue's hand and fetches again once the hand is
// empty. The policy decides which queue each free slot serves, among the
// queues with a delivery in hand and those whose fetch is under way and
// believed to find work; a slot picked for a queue whose fetch is under
// way is owed to it and waits for that fetch, never taken by another
// queue's delivery, so the weights and the strict order hold whatever the
// fetches' round trips. A queue is judged empty only when a fetch of it
// fails or outlasts its patience (see internal/dispatch and
// docs/flow-control.md). The price is a bounded prefetch: a delivery may
// wait in a hand (its lease extended from the moment it is fetched)
// beyond the free slots, at most one fetch per queue. A task its fetch
// started waits there as STARTED: under StrictPriority, for as long as a
// higher queue keeps every slot busy.

// workerQueue is one queue of a worker. hand is guarded by queueSet.mu.
type workerQueue struct {
	idx    int // in queueSet.list and the policy
	name   string
	weight int
	cap    int // most tasks running at once; 0: Concurrency
	pause  *pauseFlag
	kick   chan struct{} // wakes the queue's fetch loop

	hand []*delivery // fetched, waiting for a slot
}

// queueSet is a worker's queues and, with several, their dispatch
// state.
type queueSet struct {
	list  []*workerQueue // highest weight first
	slots int            // the worker's slots: Concurrency, or one queue's lower cap
	kick  chan struct{}  // wakes the dispatcher (several queues)

	mu     sync.Mutex       // the policy and the hands
	policy *dispatch.Policy // nil with one queue: its loop holds the slots
}

// validate reports what is wrong with cfg's queues: a weight below 1, a
// negative cap, a cap for a queue the worker does not consume, or an
// empty queue name. With Queues empty (the server's default queue), any
// cap's queue is left for NewWorker to check against that default.
func (cfg WorkerConfig) validate() error {
	var errs []error
	for q, wt := range cfg.Queues {
		if q == "" {
			errs = append(errs, errors.New("errand: WorkerConfig.Queues: empty queue name"))
		}
		if wt < 1 {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.Queues: queue %q has weight %d; weights are 1 or more", q, wt))
		}
	}
	for q, c := range cfg.QueueConcurrency {
		if c < 0 {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.QueueConcurrency: queue %q has cap %d; caps are 0 (none) or more", q, c))
		}
		if _, ok := cfg.Queues[q]; !ok && len(cfg.Queues) > 0 {
			errs = append(errs, fmt.Errorf("errand: WorkerConfig.QueueConcurrency names queue %q, which the worker does not consume", q))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// newQueueSet returns cfg's queues, highest weight first (then by name),
// with the dispatch policy when there are several. cfg.Queues has its
// default.
func newQueueSet(cfg WorkerConfig) *queueSet {
	s := &queueSet{slots: cfg.Concurrency}
	for name, wt := range cfg.Queues {
		s.list = append(s.list, &workerQueue{name: name, weight: wt, cap: cfg.QueueConcurrency[name],
			pause: &pauseFlag{}, kick: make(chan struct{}, 1)})
	}
	slices.SortFunc(s.list, func(a, b *workerQueue) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	if len(s.list) == 1 {
		if c := s.list[0].cap; c > 0 && c < s.slots {
			s.slots = c
		}
		return s
	}
	pcfg := dispatch.Config{Slots: cfg.Concurrency, Strict: cfg.StrictPriority}
	for i, q := range s.list {
		q.idx = i
		pcfg.Queues = append(pcfg.Queues, dispatch.Queue{Name: q.name, Weight: q.weight, Cap: q.cap})
	}
	s.kick = make(chan struct{}, 1)
	s.policy = dispatch.New(pcfg)
	return s
}

// names are the queues, highest weight first.
func (s *queueSet) names() []string {
	out := make([]string, len(s.list))
	for i, q := range s.list {
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

// loop runs the fetch loop of each queue and, with several, the
// dispatcher, until fetching stops; then it gives back what is still in
// hand.
func (w *Worker) loop() {
	defer close(w.loopDone)
	defer close(w.work)
	w.cancels.listening(w.fetchCtx) // a task it runs was fetched after the worker listened for its cancel
	w.poller.poll()                 // a worker starting on a paused queue fetches nothing from it
	qs := w.queues
	if qs.policy == nil {
		w.fetchQueue(qs.list[0]) // nothing waits in a hand
		return
	}
	qs.mu.Lock()
	qs.policy.Start(time.Now()) // a slot waits for a queue whose loop has yet to run
	qs.mu.Unlock()
	var fetchers sync.WaitGroup
	for _, q := range qs.list {
		fetchers.Go(func() { w.fetchQueue(q) })
	}
	w.dispatch()
	fetchers.Wait()
	var left []*delivery
	qs.mu.Lock()
	for _, q := range qs.list {
		left = append(left, q.hand...)
		q.hand = nil
	}
	qs.mu.Unlock()
	ds := make([]*driver.Delivery, 0, len(left))
	for _, dv := range left {
		dv.ext.Halt()
		ds = append(ds, dv.d)
	}
	w.giveBack(ds)
}

// fetchQueue is the fetch loop of queue q: it fetches whenever q may
// (turn) and passes on what came (fetched), until fetching stops.
func (w *Worker) fetchQueue(q *workerQueue) {
	failures := 0 // failed fetches in a row
	for {
		limit, ok := w.turn(q)
		if !ok {
			return
		}
		ds, starts, at, err := w.fetch(q.name, limit) // at: when a co-located fetch started them
		w.fetched(q, limit, ds, starts, at, time.Now(), err)
		if !w.fetchFailed(q.name, err, &failures) {
			return
		}
	}
}

// turn waits until q may fetch and returns how many deliveries to ask
// for; ok is false once fetching stops. A paused queue waits for its
// resume. With one queue, q takes every free slot, waiting for the first,
// and holds them while it fetches; with several, the policy says when and
// how many (its share and one), holding no slot, and a paused queue's
// owed slots go to the others.
func (w *Worker) turn(q *workerQueue) (limit int, ok bool) {
	qs := w.queues
	for {
		if resumed := q.pause.wait(); resumed != nil {
			if qs.policy != nil {
				qs.mu.Lock()
				qs.policy.Stop(q.idx)
				qs.mu.Unlock()
				kick(qs.kick) // a slot owed to q goes to the others
			}
			select {
			case <-resumed:
				continue
			case <-w.fetchCtx.Done():
				return 0, false
			}
		}
		if qs.policy == nil {
			select {
			case w.slots <- struct{}{}:
			case <-q.kick: // paused or resumed: look again
				continue
			case <-w.fetchCtx.Done():
				return 0, false
			}
			n := 1
		more:
			for n < qs.slots {
				select {
				case w.slots <- struct{}{}:
					n++
				default:
					break more
				}
			}
			return n, true
		}
		qs.mu.Lock()
		limit, ok := qs.policy.Fetch(q.idx, time.Now())
		qs.mu.Unlock()
		if ok {
			kick(qs.kick) // q's fetch is under way: a slot may wait for it
			return limit, true
		}
		select {
		case <-q.kick:
		case <-w.fetchCtx.Done():
			return 0, false
		}
	}
}

// fetched passes on what q's fetch of up to limit returned, at got, with
// the starts a co-located fetch made at at (starts[i] for ds[i]; nil:
// none). What a queue paused while the fetch waited is given back
// untouched. With one queue, each delivery goes to a runner on the slot
// turn took for it, and the slots left over are freed. With several, they
// go into q's hand for the dispatcher: a started delivery waits there as
// any other (STARTED is recorded meanwhile, its lease extended); one
// given back unrun is started again by its redelivery, by the table's
// rule for a redelivered STARTED task.
func (w *Worker) fetched(q *workerQueue, limit int, ds []*driver.Delivery, starts []*driver.StartResult, at, got time.Time, err error) {
	qs := w.queues
	if len(ds) > 0 && q.pause.on() {
		w.giveBack(ds) // paused while the fetch waited: give them back untouched
		ds = nil
	}
	if qs.policy == nil {
		for range limit - len(ds) {
			<-w.slots
		}
		for i, d := range ds {
			dv := &delivery{d: d, got: got}
			if starts != nil {
				dv.start, dv.startAt = starts[i], at
			}
			w.tasks.Add(1)
			w.work <- dv // never blocks: a slot is held for each delivery
		}
		if len(ds) > 0 && len(ds) < limit {
			// Fewer were due than slots free: the next fetch will likely
			// wait. Let the runners just handed a delivery go first (they
			// wait on this goroutine's P otherwise, until the next fetch
			// has been sent and blocks), so a task reaches its function
			// without waiting on the fetch behind it: tens of µs per task
			// at low load (bench, latency).
			runtime.Gosched()
		}
		return
	}
	dvs := make([]*delivery, len(ds))
	for i, d := range ds {
		if d.Queue == "" {
			d.Queue = q.name
		}
		dvs[i] = &delivery{d: d, q: q, ext: w.lease.Start(d, got)} // the lease runs while it waits in hand
		if starts != nil {
			dvs[i].start, dvs[i].startAt = starts[i], at
		}
	}
	qs.mu.Lock()
	qs.policy.Fetched(q.idx, len(dvs), err != nil, time.Now())
	q.hand = append(q.hand, dvs...)
	qs.mu.Unlock()
	kick(qs.kick)
}

// dispatch gives free slots to the queues' hands, as the policy decides,
// until fetching stops.
func (w *Worker) dispatch() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wake := w.grant()
		timer.Stop()
		var tc <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
			tc = timer.C
		}
		select {
		case <-w.queues.kick:
		case <-tc:
		case <-w.fetchCtx.Done():
			return
		}
	}
}

// grant hands each free slot to the delivery the policy picks, and
// returns when to ask the policy again (zero: on the next event).
func (w *Worker) grant() time.Time {
	qs := w.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for {
		i, wake := qs.policy.Next(time.Now())
		if i < 0 {
			return wake
		}
		q := qs.list[i]
		dv := q.hand[0]
		q.hand[0] = nil // the runner's now, once handed
		q.hand = q.hand[1:]
		if len(q.hand) == 0 {
			kick(q.kick) // its fetch is due
		}
		w.slots <- struct{}{} // never blocks: the policy counts the slots held
		w.tasks.Add(1)
		w.work <- dv // never blocks: a slot is held for each delivery
	}
}

// finished frees the slot of a task of q that ended.
func (w *Worker) finished(q *workerQueue) {
	qs := w.queues
	qs.mu.Lock()
	qs.policy.Finished(q.idx)
	qs.mu.Unlock()
	kick(q.kick)
	kick(qs.kick)
}

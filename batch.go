package errand

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/driver"
)

// Settlement batching: the portable layer joins the concurrent calls of
// many worker slots into batch calls of the driver, without a waiting
// window. A call that finds fewer than n calls of its kind (and key) in
// flight is sent at once, alone, on its caller's goroutine; one
// that finds them all busy waits for the next call, which carries every
// request queued meanwhile (up to a limit) and is sent by the first flight
// to come back. A lone task never waits for a timer; under load, batches
// form by themselves, and the busier the driver, the bigger they get.
//
// It carries, where the driver can take a batch:
//
//   - acks, per queue (driver.BatchAcker: ackFlights in flight,
//     Limits().MaxAckBatch a call);
//   - attempt starts (driver.Starter) and single state writes, SUCCESS,
//     FAILURE, RETRY and PENDING among them (driver.StateBatcher: one
//     SetStates of many tasks' states): backendFlights in flight of each,
//     maxBackendBatch a call.
//
// Every caller waits for its own request's outcome, so a caller's next
// step (a task's ack after its SUCCESS, its SUCCESS after its STARTED)
// still follows it, and the states of one task stay in order.

const (
	// ackFlights is how many AckBatch calls of one queue may be in flight
	// (driver.BatchAcker documents four).
	ackFlights = 4
	// backendFlights is how many Start calls, and how many state writes,
	// may be in flight. Two, not four: with ten worker slots, four
	// flights of each of the three settling calls (start, state, ack)
	// leave almost every call alone; with two, the Redis drain of ten
	// slots made 2.8 server reads a task instead of 3.4 at the same
	// throughput (docs/benchmarks.md's machine; with fifty slots both
	// coalesce well).
	backendFlights = 2
	// maxBackendBatch is the most requests one backend batch call carries.
	maxBackendBatch = 64
)

// coalescer joins concurrent calls of one kind into batch calls, per key.
// run makes one batch call: it answers reqs[i] in res[i] and errs[i].
type coalescer[Req, Res any] struct {
	base    context.Context // cancelled when the driver closes
	flights int             // most calls of one key in flight
	limit   int             // most requests a call (0: no limit)
	run     func(ctx context.Context, key string, reqs []Req, res []Res, errs []error)
	// answerTaken: a caller who gives up while its request is in a call
	// waits for the call's answer (the call's ctx ends once every caller in
	// it gave up), so it learns what the call did; otherwise it returns
	// ctx.Err() at once. A caller who gives up while its request is still
	// queued withdraws it either way.
	answerTaken bool

	mu     sync.Mutex
	groups map[string]*flights[Req, Res]
}

// flights are the calls of one key: how many are in flight and the
// requests waiting for the next.
type flights[Req, Res any] struct {
	flying  int
	pending []*waiter[Req, Res]
}

type waiter[Req, Res any] struct {
	ctx  context.Context
	req  Req
	done chan reply[Res] // buffered: a flight never blocks on a waiter that left
}

type reply[Res any] struct {
	res Res
	err error
}

func newCoalescer[Req, Res any](base context.Context, n, limit int, run func(ctx context.Context, key string, reqs []Req, res []Res, errs []error)) *coalescer[Req, Res] {
	return &coalescer[Req, Res]{base: base, flights: n, limit: limit, run: run, groups: map[string]*flights[Req, Res]{}}
}

// do sends req in the next batch call of key and waits for its own
// answer, or for ctx.
func (c *coalescer[Req, Res]) do(ctx context.Context, key string, req Req) (Res, error) {
	c.mu.Lock()
	g := c.groups[key]
	if g == nil {
		g = &flights[Req, Res]{}
		c.groups[key] = g
	}
	if g.flying < c.flights {
		// Nothing waits while a flight is free (requests queue only when
		// every flight is busy, and a flight ends only once none is
		// queued): this call goes alone, at once, on this goroutine.
		// What queues up meanwhile goes on another, so the caller returns
		// as soon as its own call is done.
		g.flying++
		c.mu.Unlock()
		res, err := c.one(ctx, key, req)
		if next := c.next(g); next != nil {
			go c.fly(key, g, next)
		}
		return res, err
	}
	w := &waiter[Req, Res]{ctx: ctx, req: req, done: make(chan reply[Res], 1)}
	g.pending = append(g.pending, w)
	c.mu.Unlock()
	select {
	case r := <-w.done:
		return r.res, r.err
	case <-ctx.Done():
		if !c.withdraw(g, w) && c.answerTaken {
			r := <-w.done
			return r.res, r.err
		}
		var zero Res
		return zero, ctx.Err()
	}
}

// withdraw removes w from g's queued requests, and reports false when a
// call has taken it already.
func (c *coalescer[Req, Res]) withdraw(g *flights[Req, Res], w *waiter[Req, Res]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(g.pending, w)
	if i < 0 {
		return false
	}
	g.pending = slices.Delete(g.pending, i, i+1)
	return true
}

// one makes a call of req alone, under its caller's ctx.
func (c *coalescer[Req, Res]) one(ctx context.Context, key string, req Req) (Res, error) {
	reqs, res, errs := []Req{req}, make([]Res, 1), make([]error, 1)
	c.run(ctx, key, reqs, res, errs)
	return res[0], errs[0]
}

// take removes the next batch from g; c.mu must be held.
func (c *coalescer[Req, Res]) take(g *flights[Req, Res]) []*waiter[Req, Res] {
	n := len(g.pending)
	if c.limit > 0 {
		n = min(n, c.limit)
	}
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil // let the backing array, and the waiters it holds, go
	}
	return batch
}

// fly sends batch, then keeps sending what queued up meanwhile, until
// nothing of key is pending.
func (c *coalescer[Req, Res]) fly(key string, g *flights[Req, Res], batch []*waiter[Req, Res]) {
	for batch != nil {
		c.send(key, batch)
		batch = c.next(g)
	}
}

// next takes g's next batch after a call or, when nothing is pending,
// ends that flight and returns nil. (g stays in c.groups: keys are the
// queues a worker serves, a bounded set.)
func (c *coalescer[Req, Res]) next(g *flights[Req, Res]) []*waiter[Req, Res] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(g.pending) == 0 {
		g.flying--
		return nil
	}
	return c.take(g)
}

// send makes one batch call for the waiters of batch still waiting (a
// waiter whose ctx is done is answered ctx.Err() and its request is not
// sent), under a ctx that ends when the driver closes or every waiter of
// the call has given up, and has the latest of their deadlines when they
// all have one (for drivers that honour deadlines, not cancellation). The
// call sees the values of its first waiter's ctx (a trace span). (A call
// sent alone at once, by one, runs under its caller's ctx.)
func (c *coalescer[Req, Res]) send(key string, batch []*waiter[Req, Res]) {
	live := batch[:0]
	var latest time.Time
	deadlines := true
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			w.done <- reply[Res]{err: err}
			continue
		}
		live = append(live, w)
		if d, ok := w.ctx.Deadline(); !ok {
			deadlines = false
		} else if d.After(latest) {
			latest = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(withValuesOf(c.base, live[0].ctx))
	defer cancel()
	if deadlines {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadline(ctx, latest)
		defer cancelD()
	}
	var waiting atomic.Int64
	waiting.Store(int64(len(live)))
	reqs := make([]Req, len(live))
	for i, w := range live {
		reqs[i] = w.req
		stop := context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	res := make([]Res, len(live))
	errs := make([]error, len(live))
	c.run(ctx, key, reqs, res, errs)
	for i, w := range live {
		w.done <- reply[Res]{res[i], errs[i]}
	}
}

// newAckCoalescer batches acks per queue into AckBatch calls of drv.
func newAckCoalescer(base context.Context, drv driver.BatchAcker, limit int) *coalescer[*driver.Delivery, struct{}] {
	return newCoalescer(base, ackFlights, limit, func(ctx context.Context, _ string, ds []*driver.Delivery, _ []struct{}, errs []error) {
		got := drv.AckBatch(ctx, ds)
		for i := range errs {
			if i < len(got) {
				errs[i] = got[i]
			} else {
				errs[i] = errShortAckBatch
			}
		}
	})
}

var errShortAckBatch = errors.New("errand: the broker's AckBatch returned fewer results than deliveries")

// newStateCoalescer batches single state writes into SetStates calls of
// drv. A batch of one is a SetState. When a batch fails (not by its ctx),
// each of its states is written again alone, so that one state the
// backend refuses (a result it cannot encode) fails only its own task.
func newStateCoalescer(base context.Context, drv driver.Backend, sb driver.StateBatcher) *coalescer[*TaskState, struct{}] {
	return newCoalescer(base, backendFlights, maxBackendBatch, func(ctx context.Context, _ string, sts []*TaskState, _ []struct{}, errs []error) {
		if len(sts) == 1 {
			errs[0] = drv.SetState(ctx, sts[0])
			return
		}
		err := sb.SetStates(ctx, sts)
		if err == nil || ctx.Err() != nil {
			for i := range errs {
				errs[i] = err
			}
			return
		}
		for i, st := range sts {
			errs[i] = drv.SetState(ctx, st)
		}
	})
}

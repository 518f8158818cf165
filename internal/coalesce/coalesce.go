// Package coalesce joins concurrent calls of one kind into batch calls,
// without a waiting window. errand's portable layer uses it for the
// batch-shaped driver calls on the hot path (acks, attempt starts, state
// writes, carried sends).
//
// A call that finds fewer than Flights calls of its key in flight is sent
// at once, alone, on its caller's goroutine; one that finds them all busy
// waits for the next call, which carries every request queued meanwhile
// (up to Limit) and is sent by the first flight to come back, on a
// goroutine of the Coalescer's own. A lone call never waits for a timer;
// under load, batches form by themselves, and the busier the callee, the
// bigger they get. Every caller waits for its own request's answer, so a
// caller's next step still follows it.
//
// Close answers what is queued, ends the calls in flight on the
// Coalescer's goroutines and waits for them: no goroutine of a Coalescer
// outlives its Close.
package coalesce

import (
	"github.com/errand-go/errand/internal/ctxvalues"

	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is what Do answers after Close, unless Config.Closed says
// otherwise.
var ErrClosed = errors.New("coalesce: closed")

// Func makes one batch call: it answers reqs[i] in res[i] and errs[i]
// (both slices come zeroed, as long as reqs). Every request of one call
// has the same key. It must honour ctx.
type Func[Req, Res any] func(ctx context.Context, key string, reqs []Req, res []Res, errs []error)

// Config configures a Coalescer.
type Config[Req, Res any] struct {
	// Flights is how many calls of one key may be in flight before
	// further calls queue for the next. Below 1: 1.
	Flights int
	// Limit is the most requests one call carries. 0: no limit.
	Limit int
	// AnswerTaken: a caller who gives up while its request is in a call
	// waits for that call's answer (the call's ctx ends once every caller
	// in it gave up), so it learns what the call did. Otherwise it returns
	// ctx.Err() at once. A caller who gives up while its request is still
	// queued withdraws it either way.
	AnswerTaken bool
	// Closed is what Do answers after Close, and what Close answers the
	// requests still queued. Default: ErrClosed.
	Closed error
	// Run makes the batch calls.
	Run Func[Req, Res]
}

// Coalescer joins concurrent calls into batch calls, per key. Its methods
// may be called concurrently. Keys are kept for the Coalescer's life, so
// they should be a bounded set (the queues a worker serves).
type Coalescer[Req, Res any] struct {
	cfg    Config[Req, Res]
	base   context.Context    // the ctx of the calls on c's goroutines
	cancel context.CancelFunc // ends base, on Close
	wg     sync.WaitGroup     // c's goroutines; Add only under mu while !closed

	mu     sync.Mutex
	closed bool
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
	done chan reply[Res] // buffered: a call never blocks on a waiter that left
}

type reply[Res any] struct {
	res Res
	err error
}

// New returns a Coalescer making its calls with cfg.Run.
func New[Req, Res any](cfg Config[Req, Res]) *Coalescer[Req, Res] {
	cfg.Flights = max(cfg.Flights, 1)
	if cfg.Closed == nil {
		cfg.Closed = ErrClosed
	}
	c := &Coalescer[Req, Res]{cfg: cfg, groups: map[string]*flights[Req, Res]{}}
	c.base, c.cancel = context.WithCancel(context.Background())
	return c
}

// Do sends req in the next batch call of key and waits for its own
// answer, or for ctx. After Close it answers Config.Closed.
func (c *Coalescer[Req, Res]) Do(ctx context.Context, key string, req Req) (Res, error) {
	var zero Res
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return zero, c.cfg.Closed
	}
	g := c.groups[key]
	if g == nil {
		g = &flights[Req, Res]{}
		c.groups[key] = g
	}
	if g.flying < c.cfg.Flights {
		// Nothing waits while a flight is free (requests queue only when
		// every flight is busy, and a flight ends only once none is
		// queued): this call goes alone, at once, on this goroutine.
		// What queues up meanwhile goes on one of c's, so the caller
		// returns as soon as its own call is done.
		g.flying++
		c.mu.Unlock()
		res, err := c.one(ctx, key, req)
		c.mu.Lock()
		if next := c.take(g); next != nil {
			c.wg.Add(1)
			go c.fly(key, g, next)
		}
		c.mu.Unlock()
		return res, err
	}
	w := &waiter[Req, Res]{ctx: ctx, req: req, done: make(chan reply[Res], 1)}
	g.pending = append(g.pending, w)
	c.mu.Unlock()
	select {
	case r := <-w.done:
		return r.res, r.err
	case <-ctx.Done():
		if !c.withdraw(g, w) && c.cfg.AnswerTaken {
			r := <-w.done
			return r.res, r.err
		}
		return zero, ctx.Err()
	}
}

// Close answers every queued request Config.Closed, ends the ctx of the
// calls in flight on c's goroutines and waits until they have returned
// and their callers are answered. A call sent alone on its caller's
// goroutine runs under that caller's ctx: Close does not wait for it (its
// caller is there to take its answer), and nothing is sent after it.
// Every later Do answers Config.Closed. A second Close is harmless.
func (c *Coalescer[Req, Res]) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, g := range c.groups {
			for _, w := range g.pending {
				w.done <- reply[Res]{err: c.cfg.Closed}
			}
			g.pending = nil
		}
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// withdraw removes w from g's queued requests, and reports false when a
// call has taken it already (or Close answered it).
func (c *Coalescer[Req, Res]) withdraw(g *flights[Req, Res], w *waiter[Req, Res]) bool {
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
func (c *Coalescer[Req, Res]) one(ctx context.Context, key string, req Req) (Res, error) {
	call := &lone[Req, Res]{reqs: [1]Req{req}} // the three slices in one allocation
	c.cfg.Run(ctx, key, call.reqs[:], call.res[:], call.errs[:])
	return call.res[0], call.errs[0]
}

// smallBatch is the most requests a batch call holds in one allocation
// (small).
const smallBatch = 8

// small holds the slices of a batch call of up to smallBatch requests.
type small[Req, Res any] struct {
	reqs [smallBatch]Req
	res  [smallBatch]Res
	errs [smallBatch]error
}

// lone holds the slices of a call of one request.
type lone[Req, Res any] struct {
	reqs [1]Req
	res  [1]Res
	errs [1]error
}

// gate ends a batch call (cancel) once every waiter in it gave up.
type gate struct {
	waiting atomic.Int64
	cancel  context.CancelFunc
}

func (g *gate) leave() {
	if g.waiting.Add(-1) == 0 {
		g.cancel()
	}
}

// take removes g's next batch after one of its calls came back or, when
// nothing is queued, ends that flight and returns nil; c.mu must be held.
// (g stays in c.groups.) After Close nothing is queued.
func (c *Coalescer[Req, Res]) take(g *flights[Req, Res]) []*waiter[Req, Res] {
	n := len(g.pending)
	if n == 0 {
		g.flying--
		return nil
	}
	if c.cfg.Limit > 0 {
		n = min(n, c.cfg.Limit)
	}
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil // let the backing array, and the waiters it holds, go
	}
	return batch
}

// fly sends batch, then keeps sending what queued up meanwhile, until
// nothing of key is queued.
func (c *Coalescer[Req, Res]) fly(key string, g *flights[Req, Res], batch []*waiter[Req, Res]) {
	defer c.wg.Done()
	for batch != nil {
		c.send(key, batch)
		c.mu.Lock()
		batch = c.take(g)
		c.mu.Unlock()
	}
}

// send makes one batch call for the waiters of batch still waiting (a
// waiter whose ctx is done is answered ctx.Err() and its request is not
// sent), under a ctx that ends on Close or once every waiter of the call
// has given up, and has the latest of their deadlines when they all have
// one (for callees that honour deadlines, not cancellation). The call
// sees the values of its first waiter's ctx (a trace span).
func (c *Coalescer[Req, Res]) send(key string, batch []*waiter[Req, Res]) {
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
	if oneCtx(live) {
		// Every waiter under one ctx (a worker's steps share theirs): the
		// call's is that ctx, which ends when they all give up and has
		// their deadline, ended on Close too.
		ctx, cancel := context.WithCancel(live[0].ctx)
		defer cancel()
		defer context.AfterFunc(c.base, cancel)()
		c.run(ctx, key, live)
		return
	}
	ctx, cancel := context.WithCancel(ctxvalues.Of(c.base, live[0].ctx))
	defer cancel()
	if deadlines {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadline(ctx, latest)
		defer cancelD()
	}
	g := &gate{cancel: cancel}
	g.waiting.Store(int64(len(live)))
	leave := g.leave
	stops := make([]func() bool, len(live))
	for i, w := range live {
		stops[i] = context.AfterFunc(w.ctx, leave)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	c.run(ctx, key, live)
}

// run makes the call of the waiters live under ctx and answers them.
func (c *Coalescer[Req, Res]) run(ctx context.Context, key string, live []*waiter[Req, Res]) {
	var reqs []Req
	var res []Res
	var errs []error
	if n := len(live); n <= smallBatch {
		b := new(small[Req, Res]) // the three slices in one allocation
		reqs, res, errs = b.reqs[:n:n], b.res[:n:n], b.errs[:n:n]
	} else {
		reqs, res, errs = make([]Req, n), make([]Res, n), make([]error, n)
	}
	for i, w := range live {
		reqs[i] = w.req
	}
	c.cfg.Run(ctx, key, reqs, res, errs)
	for i, w := range live {
		w.done <- reply[Res]{res[i], errs[i]}
	}
}

// oneCtx reports whether every waiter of live waits under one ctx. Only
// pointer ctxs are compared: comparing two values of a struct ctx type
// panics when a field holds an uncomparable value, which the type does not
// tell (an interface field), and every ctx the context package makes is a
// pointer.
func oneCtx[Req, Res any](live []*waiter[Req, Res]) bool {
	first := live[0].ctx
	if len(live) > 1 && reflect.TypeOf(first).Kind() != reflect.Pointer {
		return false
	}
	for _, w := range live[1:] {
		if w.ctx != first {
			return false
		}
	}
	return true
}

// Queued reports how many requests wait for a call, over every key (for
// tests).
func (c *Coalescer[Req, Res]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, g := range c.groups {
		n += len(g.pending)
	}
	return n
}

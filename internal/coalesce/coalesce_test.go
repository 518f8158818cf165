package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// testFlights is the coalescers' flights in these tests.
const testFlights = 4

// batchLog is a coalescer's run for the tests: it records each call's
// requests, holds the calls of key "held" until gate closes (or their ctx
// ends), and answers request r with r*10, or with an error for a negative
// r.
type batchLog struct {
	mu    sync.Mutex
	calls [][]int
	gate  chan struct{}
}

func (l *batchLog) run(ctx context.Context, key string, reqs []int, res []int, errs []error) {
	l.mu.Lock()
	l.calls = append(l.calls, slices.Clone(reqs))
	l.mu.Unlock()
	if key == "held" {
		gate := l.gate
		select {
		case <-gate:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return
		}
	}
	for i, r := range reqs {
		if r < 0 {
			errs[i] = fmt.Errorf("request %d refused", r)
			continue
		}
		res[i] = r * 10
	}
}

func (l *batchLog) sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, c := range l.calls {
		out = append(out, len(c))
	}
	return out
}

// TestCoalescerLoneCallGoesAtOnce: a call that finds a flight free is sent
// alone, on the caller's goroutine, without any time passing (no window,
// no timer), and leaves nothing behind.
func TestCoalescerLoneCallGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l batchLog
		c := New(Config[int, int]{Flights: testFlights, Run: l.run})
		start := time.Now()
		for i := range 3 {
			got, err := c.Do(t.Context(), "q", i+1)
			if err != nil || got != (i+1)*10 {
				t.Fatalf("lone call %d = %d, %v; want %d, nil", i, got, err, (i+1)*10)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("three lone calls took %v of the bubble's clock; a lone call must never wait for a window", d)
		}
		if got := l.sizes(); !slices.Equal(got, []int{1, 1, 1}) {
			t.Fatalf("lone calls made batch calls of sizes %v; want three calls of one", got)
		}
		if c.tracked() != 0 {
			t.Fatalf("after every call returned the coalescer still tracks %d keys; batches %v", c.tracked(), l.sizes())
		}
	})
}

// tracked is how many keys c has calls of, in flight or queued.
func (c *Coalescer[Req, Res]) tracked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, g := range c.groups {
		if g.flying != 0 || len(g.pending) != 0 {
			n++
		}
	}
	return n
}

// TestCoalescerConcurrentCallsCoalesce: while testFlights calls are in
// flight, later calls queue and go together in the next call, bounded by
// the limit; each caller gets its own answer, errors included; keys do
// not mix.
func TestCoalescerConcurrentCallsCoalesce(t *testing.T) {
	for _, limit := range []int{0, 4} {
		t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := batchLog{gate: make(chan struct{})}
				c := New(Config[int, int]{Flights: testFlights, Limit: limit, Run: l.run})
				const n = 14 // testFlights held, then 10 queued
				type answer struct {
					res int
					err error
				}
				answers := make([]answer, n)
				var wg sync.WaitGroup
				for i := range n {
					if i == testFlights {
						synctest.Wait() // every flight is busy before the rest call
					}
					req := i + 1
					if i%3 == 2 {
						req = -req
					}
					wg.Go(func() {
						r, err := c.Do(t.Context(), "held", req)
						answers[i] = answer{r, err}
					})
				}
				synctest.Wait()
				if got := l.sizes(); !slices.Equal(got, []int{1, 1, 1, 1}) {
					t.Fatalf("with every flight held, batch calls so far %v; want %d calls of one and the rest queued", got, testFlights)
				}
				// Another key has flights of its own.
				if r, err := c.Do(t.Context(), "other", 7); err != nil || r != 70 {
					t.Fatalf("a call of another key while the first key's flights are busy = %d, %v; want 70 at once", r, err)
				}
				close(l.gate)
				wg.Wait()
				for i, a := range answers {
					req := i + 1
					switch {
					case i%3 == 2 && (a.err == nil || a.err.Error() != fmt.Sprintf("request %d refused", -req)):
						t.Errorf("call %d: error %v; want its own error, request %d refused", i, a.err, -req)
					case i%3 != 2 && (a.err != nil || a.res != req*10):
						t.Errorf("call %d = %d, %v; want %d, nil", i, a.res, a.err, req*10)
					}
				}
				sizes := l.sizes()
				total, biggest := 0, 0
				for _, s := range sizes {
					total += s
					biggest = max(biggest, s)
				}
				if total != n+1 {
					t.Fatalf("batch calls %v carried %d requests; want %d", sizes, total, n+1)
				}
				want := n - testFlights
				if limit > 0 {
					want = limit
				}
				if biggest != want {
					t.Fatalf("batch calls %v: biggest %d; want the %d queued calls together (limit %d)", sizes, biggest, want, limit)
				}
				synctest.Wait() // the flights end once they have answered
				if c.tracked() != 0 {
					t.Fatalf("after every call returned the coalescer still tracks %d keys; batches %v", c.tracked(), l.sizes())
				}
			})
		})
	}
}

// TestCoalescerBatchCtxEndsWhenAllGaveUp: a batch call's ctx carries the
// latest of its waiters' deadlines and ends only once every waiter has
// given up; a waiter that gives up is answered its ctx's error at once; a
// waiter that gave up before its batch was sent is not sent at all.
func TestCoalescerBatchCtxEndsWhenAllGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := batchLog{gate: make(chan struct{})}
		type seen struct {
			reqs     []int
			deadline time.Time
			ended    time.Duration // after the call began; -1 while it runs
		}
		var mu sync.Mutex
		var calls []*seen
		c := New(Config[int, int]{Flights: testFlights, Run: func(ctx context.Context, key string, reqs []int, res []int, errs []error) {
			if key == "held" {
				l.run(ctx, key, reqs, res, errs)
				return
			}
			s := &seen{reqs: slices.Clone(reqs), ended: -1}
			s.deadline, _ = ctx.Deadline()
			mu.Lock()
			calls = append(calls, s)
			mu.Unlock()
			began := time.Now()
			<-ctx.Done()
			mu.Lock()
			s.ended = time.Since(began)
			mu.Unlock()
			for i := range errs {
				errs[i] = ctx.Err()
			}
		}})
		// Hold every flight of key "k" on a call that waits for its ctx:
		// the first four calls, each alone.
		base := time.Now()
		var wg sync.WaitGroup
		holders := make([]context.CancelFunc, testFlights)
		for i := range testFlights {
			ctx, cancel := context.WithCancel(t.Context())
			holders[i] = cancel
			wg.Go(func() { c.Do(ctx, "k", 100+i) })
		}
		synctest.Wait()
		// Three more queue: a (deadline 1s), b (deadline 3s) and z, whose
		// ctx ends before its batch goes.
		ctxA, cancelA := context.WithTimeout(t.Context(), time.Second)
		defer cancelA()
		ctxB, cancelB := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancelB()
		ctxZ, cancelZ := context.WithCancel(t.Context())
		errA, errB, errZ := make(chan error, 1), make(chan error, 1), make(chan error, 1)
		go func() { _, err := c.Do(ctxA, "k", 1); errA <- err }()
		synctest.Wait() // queued in this order
		go func() { _, err := c.Do(ctxB, "k", 2); errB <- err }()
		synctest.Wait()
		go func() { _, err := c.Do(ctxZ, "k", 3); errZ <- err }()
		synctest.Wait()
		cancelZ()
		if err := <-errZ; !errors.Is(err, context.Canceled) {
			t.Fatalf("a queued waiter whose ctx was cancelled returned %v; want context.Canceled at once", err)
		}
		holders[0]() // one flight comes back and sends the queue
		synctest.Wait()
		mu.Lock()
		last := calls[len(calls)-1]
		mu.Unlock()
		if !slices.Equal(last.reqs, []int{1, 2}) {
			t.Fatalf("the batch after a flight came back carried %v; want [1 2] (3's waiter gave up before it was sent)", last.reqs)
		}
		if want := base.Add(3 * time.Second); !last.deadline.Equal(want) {
			t.Fatalf("the batch call's deadline is %v; want the latest of its waiters', %v", last.deadline, want)
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if err := <-errA; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter a past its 1s deadline returned %v; want context.DeadlineExceeded", err)
		}
		mu.Lock()
		ended := last.ended
		mu.Unlock()
		if ended >= 0 {
			t.Fatalf("the batch call's ctx ended after %v, when one of its two waiters had given up; it must last until both have", ended)
		}
		cancelB()
		synctest.Wait()
		if err := <-errB; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter b, cancelled, returned %v; want context.Canceled", err)
		}
		mu.Lock()
		ended = last.ended
		mu.Unlock()
		if ended < 0 {
			t.Fatalf("the batch call's ctx had not ended once every waiter had given up")
		}
		for _, h := range holders[1:] {
			h()
		}
		wg.Wait()
		synctest.Wait()
		if c.tracked() != 0 {
			t.Fatalf("after every call returned the coalescer still tracks %d keys; batches %v", c.tracked(), l.sizes())
		}
	})
}

// TestCloseEndsAndWaits: Close ends the batch calls in flight on the
// coalescer's goroutines and returns only once they have returned and
// their callers are answered; a call sent alone at once runs on under its
// caller's ctx; what is queued is answered ErrClosed without being sent,
// and so is every Do after Close. No goroutine of the coalescer outlives
// Close (synctest.Test fails on one left blocked in the bubble).
func TestCloseEndsAndWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var batchReturned atomic.Bool
		var mu sync.Mutex
		var sent [][]int
		c := New(Config[int, int]{Flights: 1, Limit: 1, Run: func(ctx context.Context, _ string, reqs []int, _ []int, errs []error) {
			mu.Lock()
			sent = append(sent, slices.Clone(reqs))
			mu.Unlock()
			if reqs[0] == 0 { // the lone call holding the one flight
				<-gate
				return
			}
			<-ctx.Done() // a batch call: ends only when Close ends it
			for i := range errs {
				errs[i] = ctx.Err()
			}
			batchReturned.Store(true)
		}})
		lone := make(chan error, 1)
		go func() { _, err := c.Do(t.Context(), "k", 0); lone <- err }()
		synctest.Wait()
		// Two queue behind the lone call; with a limit of 1, the first is
		// sent when the lone call comes back, the second stays queued.
		batched, queued := make(chan error, 1), make(chan error, 1)
		go func() { _, err := c.Do(t.Context(), "k", 1); batched <- err }()
		synctest.Wait()
		go func() { _, err := c.Do(t.Context(), "k", 2); queued <- err }()
		synctest.Wait()
		close(gate)
		if err := <-lone; err != nil {
			t.Fatalf("the lone call returned %v; want its own outcome", err)
		}
		synctest.Wait() // request 1 is in a call on the coalescer's goroutine
		c.Close()
		if !batchReturned.Load() {
			t.Fatal("Close returned while a batch call it started was still running; it must wait for its calls in flight")
		}
		if err := <-batched; !errors.Is(err, context.Canceled) {
			t.Fatalf("the batch call in flight at Close answered %v; want its ctx ended (context.Canceled)", err)
		}
		if err := <-queued; !errors.Is(err, ErrClosed) {
			t.Fatalf("a request queued at Close answered %v; want ErrClosed", err)
		}
		if _, err := c.Do(t.Context(), "k", 3); !errors.Is(err, ErrClosed) {
			t.Fatalf("Do after Close answered %v; want ErrClosed", err)
		}
		c.Close() // harmless
		mu.Lock()
		defer mu.Unlock()
		if !slices.EqualFunc(sent, [][]int{{0}, {1}}, slices.Equal) {
			t.Fatalf("calls sent %v; want [0] alone, then [1] (2 was queued at Close, 3 came after)", sent)
		}
	})
}

// TestCloseAnswersCustomError: Config.Closed is what Do answers after
// Close.
func TestCloseAnswersCustomError(t *testing.T) {
	mine := errors.New("mine: closed")
	c := New(Config[int, int]{Closed: mine, Run: func(context.Context, string, []int, []int, []error) {}})
	c.Close()
	if _, err := c.Do(t.Context(), "k", 1); err != mine {
		t.Fatalf("Do after Close with Config.Closed set answered %v; want %v", err, mine)
	}
}

// TestCloseUnderLoadLeavesNothing: many callers against a slow callee,
// Close in the middle: every caller is answered (its outcome, ctx's end
// or ErrClosed), Close returns, and no goroutine is left (synctest).
func TestCloseUnderLoadLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Config[int, int]{Flights: 2, Limit: 3, Run: func(ctx context.Context, _ string, reqs []int, res []int, errs []error) {
			select {
			case <-time.After(time.Millisecond):
				for i, r := range reqs {
					res[i] = r
				}
			case <-ctx.Done():
				for i := range errs {
					errs[i] = ctx.Err()
				}
			}
		}})
		var wg sync.WaitGroup
		var answered atomic.Int64
		for i := range 50 {
			wg.Go(func() {
				r, err := c.Do(t.Context(), fmt.Sprint("k", i%3), i)
				if err == nil && r != i {
					t.Errorf("request %d answered %d", i, r)
				}
				answered.Add(1)
			})
		}
		time.Sleep(2 * time.Millisecond) // the bubble's clock: some calls done, some in flight
		c.Close()
		wg.Wait()
		if answered.Load() != 50 {
			t.Fatalf("%d of 50 callers answered", answered.Load())
		}
		if c.tracked() != 0 {
			t.Fatalf("after Close and every caller answered, the coalescer still tracks %d keys", c.tracked())
		}
	})
}

// TestCoalescerBatchUnderOneCtx: waiters that share one ctx (a worker's
// steps share theirs) are sent under a ctx with its deadline and values,
// which ends when that ctx ends, or on Close.
func TestCoalescerBatchUnderOneCtx(t *testing.T) {
	type valueKey struct{}
	for _, end := range []string{"ctx", "close"} {
		synctest.Test(t, func(t *testing.T) {
			type seen struct {
				reqs     []int
				deadline time.Time
				value    any
				err      error // the ctx's, once it ended
			}
			calls := make(chan *seen, 16)
			c := New(Config[int, int]{Flights: 1, Run: func(ctx context.Context, key string, reqs []int, res []int, errs []error) {
				s := &seen{reqs: slices.Clone(reqs), value: ctx.Value(valueKey{})}
				s.deadline, _ = ctx.Deadline()
				<-ctx.Done()
				s.err = ctx.Err()
				calls <- s
				for i := range errs {
					errs[i] = ctx.Err()
				}
			}})
			holder, release := context.WithCancel(t.Context())
			go c.Do(holder, "k", 0) // the one flight, held until release
			synctest.Wait()
			base := time.Now()
			shared, cancel := context.WithTimeout(context.WithValue(t.Context(), valueKey{}, "v"), time.Hour)
			defer cancel()
			errs := make(chan error, 2)
			for r := range 2 {
				go func() { _, err := c.Do(shared, "k", r+1); errs <- err }()
			}
			synctest.Wait()
			release()
			synctest.Wait()
			if s := <-calls; !slices.Equal(s.reqs, []int{0}) {
				t.Fatalf("the held call carried %v; want [0]", s.reqs)
			}
			switch end {
			case "ctx":
				cancel()
			case "close":
				go c.Close()
			}
			synctest.Wait()
			s := <-calls
			if !slices.Equal(s.reqs, []int{1, 2}) && !slices.Equal(s.reqs, []int{2, 1}) {
				t.Fatalf("the batch carried %v; want both waiters' requests", s.reqs)
			}
			if want := base.Add(time.Hour); !s.deadline.Equal(want) || s.value != "v" {
				t.Fatalf("the batch call's deadline %v and value %v; want the shared ctx's, %v and v", s.deadline, s.value, want)
			}
			if !errors.Is(s.err, context.Canceled) {
				t.Fatalf("the batch call's ctx ended with %v; want context.Canceled (%s)", s.err, end)
			}
			for range 2 {
				if err := <-errs; err == nil {
					t.Fatalf("a waiter was answered nil after its call's ctx ended (%s)", end)
				}
			}
			c.Close()
		})
	}
}

// structCtx is a ctx of a struct type whose field may hold an uncomparable
// value: comparing two of them with == panics.
type structCtx struct {
	context.Context
	tag any
}

// TestCoalescerBatchOfStructCtxs: waiters under ctxs of a struct type that
// cannot be compared are batched and answered, not panicked on.
func TestCoalescerBatchOfStructCtxs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l batchLog
		l.gate = make(chan struct{})
		c := New(Config[int, int]{Flights: 1, Run: l.run})
		defer c.Close()
		go c.Do(t.Context(), "held", 0) // the one flight, held until the gate opens
		synctest.Wait()
		type answer struct {
			got int
			err error
		}
		answers := make(chan answer, 2)
		for r := range 2 {
			ctx := structCtx{Context: t.Context(), tag: []int{r}}
			go func() { got, err := c.Do(ctx, "held", r+1); answers <- answer{got, err} }()
		}
		synctest.Wait()
		close(l.gate)
		synctest.Wait()
		sum := 0
		for range 2 {
			a := <-answers
			if a.err != nil {
				t.Fatalf("a waiter under a struct ctx was answered %v; want its result", a.err)
			}
			sum += a.got
		}
		if sum != 30 {
			t.Fatalf("the struct-ctx waiters got results summing to %d; want 10+20", sum)
		}
		if got := l.sizes(); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("calls of sizes %v; want the held one then one batch of both", got)
		}
	})
}

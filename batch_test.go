package errand

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand/driver"
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
		c := newCoalescer(t.Context(), testFlights, 0, l.run)
		start := time.Now()
		for i := range 3 {
			got, err := c.do(t.Context(), "q", i+1)
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
func (c *coalescer[Req, Res]) tracked() int {
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
				c := newCoalescer(t.Context(), testFlights, limit, l.run)
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
						r, err := c.do(t.Context(), "held", req)
						answers[i] = answer{r, err}
					})
				}
				synctest.Wait()
				if got := l.sizes(); !slices.Equal(got, []int{1, 1, 1, 1}) {
					t.Fatalf("with every flight held, batch calls so far %v; want %d calls of one and the rest queued", got, testFlights)
				}
				// Another key has flights of its own.
				if r, err := c.do(t.Context(), "other", 7); err != nil || r != 70 {
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
		c := newCoalescer(t.Context(), testFlights, 0, func(ctx context.Context, key string, reqs []int, res []int, errs []error) {
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
		})
		// Hold every flight of key "k" on a call that waits for its ctx:
		// the first four calls, each alone.
		base := time.Now()
		var wg sync.WaitGroup
		holders := make([]context.CancelFunc, testFlights)
		for i := range testFlights {
			ctx, cancel := context.WithCancel(t.Context())
			holders[i] = cancel
			wg.Go(func() { c.do(ctx, "k", 100+i) })
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
		go func() { _, err := c.do(ctxA, "k", 1); errA <- err }()
		synctest.Wait() // queued in this order
		go func() { _, err := c.do(ctxB, "k", 2); errB <- err }()
		synctest.Wait()
		go func() { _, err := c.do(ctxZ, "k", 3); errZ <- err }()
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

// TestCoalescerBaseEndsCalls: closing the driver (the base ctx) ends the
// batch calls in flight; a call sent alone at once runs under its
// caller's ctx.
func TestCoalescerBaseEndsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base, stop := context.WithCancel(t.Context())
		gate := make(chan struct{})
		c := newCoalescer(base, testFlights, 0, func(ctx context.Context, _ string, reqs []int, _ []int, errs []error) {
			if reqs[0] < 100 { // the lone calls holding every flight
				<-gate
				return
			}
			<-ctx.Done()
			for i := range errs {
				errs[i] = ctx.Err()
			}
		})
		lone := make(chan error, testFlights)
		for i := range testFlights {
			go func() { _, err := c.do(t.Context(), "k", i); lone <- err }()
		}
		synctest.Wait()
		batched := make(chan error, 1)
		go func() { _, err := c.do(t.Context(), "k", 100); batched <- err }()
		synctest.Wait()
		stop()
		close(gate)
		for range testFlights {
			if err := <-lone; err != nil {
				t.Fatalf("a lone call under its caller's live ctx returned %v after the driver closed; want its own outcome", err)
			}
		}
		if err := <-batched; !errors.Is(err, context.Canceled) {
			t.Fatalf("a batch call sent after the driver closed returned %v; want its batch ctx's end (context.Canceled)", err)
		}
	})
}

// stateBatcher is a driver.Backend and driver.StateBatcher for the state
// coalescer's tests: SetStates fails whole when any state is refused;
// SetState fails only a refused one.
type stateBatcher struct {
	driver.Backend
	mu      sync.Mutex
	batches [][]string
	singles []string
	written []string
}

func refused(st *TaskState) bool { return st.TaskUUID == "bad" }

func (b *stateBatcher) SetStates(_ context.Context, sts []*TaskState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for _, st := range sts {
		ids = append(ids, st.TaskUUID)
		if refused(st) {
			b.batches = append(b.batches, ids)
			return errors.New("cannot encode a result")
		}
	}
	b.batches = append(b.batches, ids)
	b.written = append(b.written, ids...)
	return nil
}

func (b *stateBatcher) SetState(_ context.Context, st *TaskState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.singles = append(b.singles, st.TaskUUID)
	if refused(st) {
		return errors.New("cannot encode a result")
	}
	b.written = append(b.written, st.TaskUUID)
	return nil
}

// TestStateCoalescerErrorsPerTask: one state the backend refuses fails
// only its own task: a failed SetStates is written again state by state.
// A lone state is one SetState.
func TestStateCoalescerErrorsPerTask(t *testing.T) {
	drv := &stateBatcher{}
	c := newStateCoalescer(t.Context(), drv, drv)
	if _, err := c.do(t.Context(), "", &TaskState{TaskUUID: "lone"}); err != nil {
		t.Fatal(err)
	}
	if len(drv.batches) != 0 || !slices.Equal(drv.singles, []string{"lone"}) {
		t.Fatalf("a lone state went as SetStates %v, SetState %v; want one SetState", drv.batches, drv.singles)
	}
	drv.singles = nil
	var res []error
	c.run(t.Context(), "", []*TaskState{{TaskUUID: "a"}, {TaskUUID: "bad"}, {TaskUUID: "c"}}, make([]struct{}, 3), func() []error {
		res = make([]error, 3)
		return res
	}())
	if res[0] != nil || res[1] == nil || res[2] != nil {
		t.Fatalf("a batch with one refused state answered %v; want an error for that state alone", res)
	}
	if !slices.Equal(drv.singles, []string{"a", "bad", "c"}) || !slices.Contains(drv.written, "a") || !slices.Contains(drv.written, "c") {
		t.Fatalf("after the failed batch: written one by one %v, written %v; want each state tried alone, a and c written", drv.singles, drv.written)
	}
}

// shortAcker answers fewer results than deliveries.
type shortAcker struct{}

func (shortAcker) AckBatch(context.Context, []*driver.Delivery) []error { return []error{nil} }

func TestAckCoalescerShortAnswer(t *testing.T) {
	c := newAckCoalescer(t.Context(), shortAcker{}, 0)
	errs := make([]error, 2)
	c.run(t.Context(), "q", []*driver.Delivery{{}, {}}, make([]struct{}, 2), errs)
	if errs[0] != nil || !errors.Is(errs[1], errShortAckBatch) {
		t.Fatalf("a broker answering one result for two deliveries: %v; want nil, then errShortAckBatch", errs)
	}
}

// queued is how many requests wait for a call, over every key.
func (c *coalescer[Req, Res]) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, g := range c.groups {
		n += len(g.pending)
	}
	return n
}

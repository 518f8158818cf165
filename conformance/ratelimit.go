package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Rate limits: the broker's token buckets (driver.RateLimiter), checked on
// the driver, and errand's per-task limits end to end. Each case logs and
// checks nothing else when the harness does not declare RateLimit.

func (c *bcase) rateLimiter() driver.RateLimiter {
	c.t.Helper()
	rl, ok := c.drv.(driver.RateLimiter)
	if !ok {
		c.t.Fatalf("harness declares RateLimit but %T is not a driver.RateLimiter", c.drv)
	}
	return rl
}

// rateBucket: a new bucket gives burst tokens at once and then refuses,
// with a wait no longer than one token's time; refused callers are spread
// 1/rate apart; a caller that waits what it was told gets a token; and an
// idle bucket refills to burst, never beyond.
func rateBucket(t testing.TB, h BrokerHarness) {
	if !h.Caps.RateLimit {
		t.Logf("broker does not declare RateLimit; errand refuses WithRateLimit on it")
		return
	}
	const promise = "rate limit (a token bucket: burst at once, then rate a second)"
	c := newBCase(t, h)
	rl := c.rateLimiter()
	key := name(t, "bucket")
	const rate, burst = 20.0, 4
	every := time.Duration(float64(time.Second) / rate)
	const slack = 5 * time.Millisecond // the server's clock and rounding
	take := func() time.Duration {
		t.Helper()
		w, err := rl.Take(c.ctx, key, rate, burst)
		if err != nil {
			t.Fatalf("Take(%s, %v, %d): %v", key, rate, burst, err)
		}
		if w < 0 {
			t.Fatalf("%s promise broken: Take returned a negative wait %v", promise, w)
		}
		return w
	}
	// drain takes until refused and returns the refusal's wait; at most
	// burst tokens, plus what accrued meanwhile, may be taken.
	var refusedAt time.Time // when the call drain's refusal answered was made
	drain := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		for n := 0; ; n++ {
			refusedAt = time.Now()
			w := take()
			if w > 0 {
				if n < burst && time.Since(start) < every {
					t.Errorf("%s promise broken: %s, Take was refused (wait %v) after %d tokens, want %d (the burst)", promise, what, w, n, burst)
				}
				return w
			}
			if allowed := burst + int(time.Since(start)/every) + 1; n+1 > allowed {
				t.Fatalf("%s promise broken: %s, Take gave %d tokens within %v, want at most %d (burst %d, rate %v/s)", promise, what, n+1, time.Since(start).Round(time.Millisecond), allowed, burst, rate)
			}
		}
	}
	w1 := drain("from a new bucket")
	if w1 > every+slack {
		t.Errorf("%s promise broken: the first refusal's wait is %v, want at most one token's time %v (rate %v/s)", promise, w1, every, rate)
	}
	before := time.Now()
	w2 := take()
	between := time.Since(before)
	for tries := 1; w2 == 0; tries++ {
		// A token may have come since the refusal only if the Take came
		// w1 or more after it (a loaded machine): drain again and retry.
		if time.Since(refusedAt) < w1 || tries == 5 {
			t.Fatalf("%s promise broken: a Take right after a refusal (wait %v; %v later) took a token", promise, w1, time.Since(refusedAt).Round(time.Millisecond))
		}
		w1 = drain("drained again")
		before = time.Now()
		w2 = take()
		between = time.Since(before)
	}
	// lo allows twice the slack: the two waits are computed on the
	// server's clock, the time between the calls on ours.
	if lo, hi := w1+every-between-2*slack, w1+every+slack; w2 < lo || w2 > hi {
		t.Errorf("%s promise broken: the second refusal in a row waits %v, want about 1/rate (%v) more than the first's %v (in [%v, %v]): refused callers are spread, not sent back together", promise, w2, every, w1, lo, hi)
	}
	if err := sleepUntil(c.ctx, time.Now().Add(w2)); err != nil {
		t.Fatal(err)
	}
	if w := take(); w != 0 {
		t.Fatalf("%s promise broken: a caller that waited the %v it was told was refused again (wait %v): the bucket does not refill", promise, w2, w)
	}
	// Idle for twice the time to fill: burst tokens again, not more.
	if err := sleepUntil(c.ctx, time.Now().Add(2*burst*every)); err != nil {
		t.Fatal(err)
	}
	drain("after the bucket stood idle for twice its fill time")
}

// rateLimitDelays: tasks over their rate limit run later, never fail, and
// keep attempt 1, recording nothing while they wait.
func rateLimitDelays(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	if !c.caps.RateLimit {
		err := c.srv.Register("limited", func() error { return nil }, errand.WithRateLimit(10, 1))
		if !isUnsupported(err) {
			t.Errorf("Register with WithRateLimit on a broker without rate limits returned %v, want an error satisfying errors.Is(err, errors.ErrUnsupported) (never silently unlimited)", err)
		}
		t.Logf("broker does not declare RateLimit")
		return
	}
	const promise = "rate limit (tasks over it are delayed, never failed, and keep their attempt)"
	const rate, burst, n = 20.0, 2, 8
	var mu sync.Mutex
	var starts []time.Time
	var attempts []int
	c.register("limited", func(ctx context.Context) error {
		info, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		starts = append(starts, time.Now())
		attempts = append(attempts, info.Attempt)
		mu.Unlock()
		return nil
	}, errand.WithRateLimit(rate, burst))
	c.start(errand.WorkerConfig{Concurrency: 4})
	var rs []*errand.AsyncResult
	sent := time.Now() // no token is taken before: the bucket's first Take follows
	for range n {
		rs = append(rs, c.send(errand.NewSignature("limited")))
	}
	for i, r := range rs {
		if _, err := r.Get(c.ctx); err != nil {
			t.Fatalf("%s promise broken: task %d of %d ended with %v, want success", promise, i+1, n, err)
		}
		c.pathIs(r.Signature.UUID, errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateSuccess)
		if st, err := r.State(c.ctx); err != nil || st.Attempt != 1 {
			t.Errorf("%s promise broken: task %d's state is %+v, %v; want attempt 1", promise, i+1, st, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	if len(starts) != n || slices.ContainsFunc(attempts, func(a int) bool { return a != 1 }) {
		t.Errorf("%s promise broken: %d tasks ran %d times with attempts %v, want %d runs, each attempt 1", promise, n, len(starts), attempts, n)
	}
	// Beyond the burst, the k-th start comes no sooner than (k-burst)/rate
	// after the bucket's first token, itself taken after the first send
	// (less a little for the clocks of worker and server). Not after the
	// first start: on a loaded machine the first task may start well
	// after its token was taken, the later ones not.
	for k := burst; k < len(starts); k++ {
		want := time.Duration(float64(k+1-burst) / rate * float64(time.Second))
		if got := starts[k].Sub(sent); got < want*8/10 {
			t.Errorf("%s promise broken: task %d of %d started %v after the first send, want at least %v (burst %d, %v/s)", promise, k+1, n, got.Round(time.Millisecond), want, burst, rate)
		}
	}
	t.Logf("%d tasks at %v/s, burst %d: started over %v", n, rate, burst, fmt.Sprint(starts[len(starts)-1].Sub(starts[0]).Round(time.Millisecond)))
}

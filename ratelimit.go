package errand

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// Rate limits per task name (WithRateLimit), kept in a token bucket on the
// broker's server (driver.RateLimiter) and so shared by every worker of
// every process on it. A worker takes a token before each attempt; a task
// over the limit goes back to its queue to be delivered again later,
// recording nothing: it never fails for it, and its attempt number and
// retries are untouched. See docs/flow-control.md.

// rateLimit is a registered task's limit.
type rateLimit struct {
	rate  float64 // tokens a second
	burst int     // the bucket's size
}

// WithRateLimit limits how often the task starts, across every worker on
// the broker's server: at most perSecond attempts a second on average,
// with bursts of up to burst (below 1: 1). An attempt over the limit is
// delayed, never failed, and does not count as an attempt. The broker must
// keep limits (driver.RateLimiter: the memory and Redis brokers do);
// Register refuses the option on one that does not, with an error
// satisfying errors.Is(err, errors.ErrUnsupported), and refuses a
// perSecond that is not a positive, finite number.
//
// Every process registering the task should give it the same limit: the
// bucket takes the values of its latest caller.
func WithRateLimit(perSecond float64, burst int) TaskOption {
	return func(t *task) { t.limit = &rateLimit{rate: perSecond, burst: max(burst, 1)} }
}

// checkRateLimit refuses a limit the broker cannot keep or that makes no
// sense.
func (s *Server) checkRateLimit(t *task) error {
	if t.limit == nil {
		return nil
	}
	if !(t.limit.rate > 0) || math.IsInf(t.limit.rate, 0) {
		return fmt.Errorf("errand: register %q: WithRateLimit(%v, %d): the rate must be a positive, finite number of tasks a second", t.name, t.limit.rate, t.limit.burst)
	}
	if s.broker.Can.RateLimiter == nil {
		return fmt.Errorf("errand: register %q: WithRateLimit: %w", t.name, portable.Unsupported("rate limits", s.broker.Drv))
	}
	return nil
}

// rateKey is the bucket of a task name on the broker.
func rateKey(name string) string { return "task:" + name }

// throttledError is what process returns with settleThrottle: the
// task is over its rate limit (or its concurrency limit: over) until wait
// has passed.
type throttledError struct {
	name string
	over string // "rate limit", "concurrency limit"
	wait time.Duration
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("errand: task %s is over its %s: delivered again in %v", e.name, e.over, e.wait)
}

// takeToken takes a token for one attempt of tk, if it is rate limited.
// It returns settleThrottle when the bucket is empty, settleRequeue when
// the broker failed, and settleAck (meaning: go on) otherwise.
func (w *Worker) takeToken(ctx context.Context, tk *task, sig *Signature) (settle, error) {
	if tk.limit == nil {
		return settleAck, nil
	}
	wait, err := portable.Use(ctx, w.srv.broker, "rate limits", func(rl driver.RateLimiter) (time.Duration, error) {
		return rl.Take(ctx, rateKey(tk.name), tk.limit.rate, tk.limit.burst)
	})
	switch {
	case err != nil: // the broker failed, or it keeps no limits (registered on another server's broker)
		return settleRequeue, fmt.Errorf("errand: task %s (%s): take a rate-limit token: %w", sig.Name, sig.UUID, err)
	case wait > 0:
		return settleThrottle, &throttledError{name: sig.Name, over: "rate limit", wait: wait}
	}
	return settleAck, nil
}

// releaseThrottled gives d back to its queue, to be delivered again once
// the wait err carries (a *throttledError) has passed. Nothing is
// recorded: the task's state, attempt and retries are as they were.
func (w *Worker) releaseThrottled(ctx context.Context, d *driver.Delivery, sig *Signature, err error) {
	wait, over := time.Duration(0), "limit"
	if th, ok := err.(*throttledError); ok {
		wait, over = th.wait, th.over
	}
	w.log.Debug("errand: task over its "+over+": given back", append(taskAttrs(sig, d.Queue), "retry_in", wait)...)
	if rerr := w.srv.broker.Release(ctx, d, time.Now().Add(wait)); rerr != nil {
		w.report(rerr, "errand: release a task over its "+over, taskAttrs(sig, d.Queue)...)
	}
}

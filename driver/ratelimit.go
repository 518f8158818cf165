package driver

import (
	"context"
	"time"
)

// RateLimiter is implemented by brokers that keep rate limits on their
// server, for errand's per-task-name limits (errand.WithRateLimit): every
// worker of every process on that server takes from the same bucket. Take
// is one atomic step on the server (a Lua script), with the server's clock
// where it has one, so workers with skewed clocks share one rate.
//
// Take may be called concurrently, and returns an error, never panics or
// blocks, after Close.
type RateLimiter interface {
	// Take takes one token from the token bucket named key, which holds at
	// most burst tokens (burst >= 1) and gains rate tokens a second
	// (rate > 0); a bucket seen for the first time is full. It returns 0
	// when a token was taken. Otherwise it takes nothing and returns how
	// long the caller should wait before trying again: at least until the
	// bucket will next hold a token, and spread over the callers it
	// refuses, each refusal's wait about 1/rate longer than the one
	// before while the bucket stays empty, so refused callers come back at
	// about the rate tokens arrive instead of all at once. (The wait is a
	// hint, not a reservation: whoever takes first gets the token.)
	//
	// rate and burst are the caller's: a bucket takes the values of the
	// latest call, so every caller of one key should pass the same ones.
	Take(ctx context.Context, key string, rate float64, burst int) (wait time.Duration, err error)
}

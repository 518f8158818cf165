package errand

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy chooses how long to wait before the next attempt of a failed
// task. next is the signature of that attempt: its Attempt is already
// incremented (2 for the first retry) and its RetryTimeout already advanced
// to the next Fibonacci number, as machinery does. err is the failure.
//
// Whether a retry happens at all is decided by the worker: only while
// attempts remain under the signature's RetryCount, never for a
// [PermanentError] or an [ArgumentError], and not past the signature's
// Deadline. A [RetryLaterError] overrides the policy's delay.
type RetryPolicy interface {
	RetryDelay(next *Signature, err error) time.Duration
}

// RetryFunc adapts a function to [RetryPolicy].
type RetryFunc func(next *Signature, err error) time.Duration

// RetryDelay calls f.
func (f RetryFunc) RetryDelay(next *Signature, err error) time.Duration { return f(next, err) }

// Fibonacci is machinery's policy: the n-th retry waits the n-th number of
// 1, 2, 3, 5, 8, 13, ... times Unit, continuing from the RetryTimeout a
// signature carries. Unit defaults to one second (machinery's unit).
type Fibonacci struct {
	Unit time.Duration
}

// RetryDelay returns next.RetryTimeout units, saturating at the longest
// time.Duration (about 292 years) instead of overflowing.
func (f Fibonacci) RetryDelay(next *Signature, _ error) time.Duration {
	u := f.Unit
	if u <= 0 {
		u = time.Second
	}
	return mulSat(time.Duration(max(next.RetryTimeout, 0)), u)
}

// fibonacciNext returns the smallest Fibonacci number greater than n
// (machinery's retry.FibonacciNext): 0→1, 1→2, 2→3, 3→5, 5→8. Past the
// largest Fibonacci number an int holds it saturates at math.MaxInt, so a
// RetryTimeout near MaxInt64 can neither overflow nor loop for ever.
func fibonacciNext(n int) int {
	a, b := 1, 2
	if n < 1 {
		return 1
	}
	for b <= n {
		if b > math.MaxInt-a {
			return math.MaxInt
		}
		a, b = b, a+b
	}
	return b
}

// mulSat returns a*b for non-negative a and b, or the longest Duration
// when the product would overflow.
func mulSat(a, b time.Duration) time.Duration {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// Fixed waits the same delay before every retry.
type Fixed time.Duration

// RetryDelay returns d.
func (d Fixed) RetryDelay(*Signature, error) time.Duration { return time.Duration(d) }

// Exponential waits Base, 2×Base, 4×Base, ... up to Max (if set), each
// delay spread by a random Jitter fraction in [0, 1]: with Jitter 0.2 a
// delay d becomes a value in [0.8d, 1.2d].
type Exponential struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
}

// RetryDelay returns the delay before attempt next.Attempt. The doubling
// saturates at Max, or at the longest time.Duration when Max is unset, and
// takes at most 63 steps whatever the attempt number.
func (e Exponential) RetryDelay(next *Signature, _ error) time.Duration {
	return spread(expDelay(e.Base, e.Max, next.Attempt-1), e.Jitter)
}

// expDelay returns base doubled n-1 times (base for n <= 1), capped at
// limit when limit > 0, saturating instead of overflowing.
func expDelay(base, limit time.Duration, n int) time.Duration {
	d := max(base, 0)
	for i := 1; i < n && d > 0 && (limit <= 0 || d < limit); i++ {
		if d > math.MaxInt64/2 {
			d = math.MaxInt64
			break
		}
		d *= 2
	}
	if limit > 0 && d > limit {
		d = limit
	}
	return d
}

// spread multiplies d by a random factor in [1-j, 1+j] (j clamped to
// [0, 1]), saturating at the longest Duration.
func spread(d time.Duration, j float64) time.Duration {
	j = min(max(j, 0), 1)
	if j == 0 {
		return d
	}
	f := float64(d) * (1 - j + 2*j*rand.Float64())
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(f)
}

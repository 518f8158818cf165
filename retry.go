package errand

import (
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

// RetryDelay returns next.RetryTimeout units.
func (f Fibonacci) RetryDelay(next *Signature, _ error) time.Duration {
	u := f.Unit
	if u <= 0 {
		u = time.Second
	}
	return time.Duration(next.RetryTimeout) * u
}

// FibonacciNext returns the smallest Fibonacci number greater than n
// (machinery's retry.FibonacciNext): 0→1, 1→2, 2→3, 3→5, 5→8.
func FibonacciNext(n int) int {
	a, b := 1, 2
	if n < 1 {
		return 1
	}
	for b <= n {
		a, b = b, a+b
	}
	return b
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

// RetryDelay returns the delay before attempt next.Attempt.
func (e Exponential) RetryDelay(next *Signature, _ error) time.Duration {
	d := e.Base
	for i := 2; i < next.Attempt && (e.Max <= 0 || d < e.Max); i++ {
		d *= 2
	}
	if e.Max > 0 && d > e.Max {
		d = e.Max
	}
	if j := min(max(e.Jitter, 0), 1); j > 0 {
		d = time.Duration(float64(d) * (1 - j + 2*j*rand.Float64()))
	}
	return d
}

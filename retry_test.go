package errand_test

import (
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

func TestFibonacciNextMatchesMachinery(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, 1}, {1, 2}, {2, 3}, {3, 5}, {5, 8}, {8, 13}, {13, 21}, {4, 5}} {
		if got := errand.FibonacciNext(c.in); got != c.want {
			t.Errorf("FibonacciNext(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

// retryDelays replays how the worker builds each next attempt and asks
// the policy for its delay.
func retryDelays(p errand.RetryPolicy, start, n int) []time.Duration {
	sig := &errand.Signature{Attempt: 1, RetryTimeout: start}
	var out []time.Duration
	for range n {
		next := sig.Copy()
		next.Attempt++
		next.RetryTimeout = errand.FibonacciNext(sig.RetryTimeout)
		out = append(out, p.RetryDelay(next, errors.New("x")))
		sig = next
	}
	return out
}

func TestRetryDelaySequences(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name   string
		policy errand.RetryPolicy
		start  int
		want   []time.Duration
	}{
		{"fibonacci seconds (machinery)", errand.Fibonacci{}, 0, []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 8 * time.Second}},
		{"fibonacci continues from RetryTimeout", errand.Fibonacci{Unit: ms}, 5, []time.Duration{8 * ms, 13 * ms, 21 * ms}},
		{"fixed", errand.Fixed(7 * ms), 0, []time.Duration{7 * ms, 7 * ms, 7 * ms}},
		{"exponential capped", errand.Exponential{Base: 10 * ms, Max: 50 * ms}, 0, []time.Duration{10 * ms, 20 * ms, 40 * ms, 50 * ms, 50 * ms}},
		{"custom func", errand.RetryFunc(func(next *errand.Signature, _ error) time.Duration { return time.Duration(next.Attempt) * ms }), 0, []time.Duration{2 * ms, 3 * ms, 4 * ms}},
	}
	for _, c := range cases {
		got := retryDelays(c.policy, c.start, len(c.want))
		for i := range c.want {
			if got[i] != c.want[i] {
				t.Errorf("%s: delays %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}

func TestExponentialJitterStaysInBand(t *testing.T) {
	p := errand.Exponential{Base: 100 * time.Millisecond, Jitter: 0.2}
	for range 200 {
		d := p.RetryDelay(&errand.Signature{Attempt: 2}, nil)
		if d < 80*time.Millisecond || d > 120*time.Millisecond {
			t.Fatalf("delay %v outside [80ms, 120ms] for jitter 0.2", d)
		}
	}
}

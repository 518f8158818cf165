package memorybroker

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.RateLimiter = (*Broker)(nil)

// bucket is one token bucket (driver.RateLimiter): the tokens it held at
// at, and when the next caller it refuses should come back.
type bucket struct {
	tokens float64
	at     time.Time
	next   time.Time
}

// Take takes a token from the bucket key under the broker's lock. The
// buckets are this broker value's: every Server and worker sharing it
// shares them, and nothing outside the process does.
func (b *Broker) Take(_ context.Context, key string, rate float64, burst int) (wait time.Duration, err error) {
	if !(rate > 0) || math.IsInf(rate, 0) || burst < 1 {
		return 0, fmt.Errorf("memory broker: rate limit %q: rate %v and burst %d: want rate > 0 and burst >= 1", key, rate, burst)
	}
	err = b.locked(func() {
		if b.buckets == nil {
			b.buckets = make(map[string]*bucket)
		}
		wait = b.take(key, rate, burst, time.Now())
	})
	return wait, err
}

// take is Take's arithmetic at now; b.mu must be held. The Redis broker's
// script does the same (see its ratelimit.go).
func (b *Broker) take(key string, rate float64, burst int, now time.Time) time.Duration {
	bk := b.buckets[key]
	if bk == nil {
		bk = &bucket{tokens: float64(burst), at: now}
		b.buckets[key] = bk
	}
	if now.After(bk.at) {
		bk.tokens += now.Sub(bk.at).Seconds() * rate
		bk.at = now
	}
	bk.tokens = min(bk.tokens, float64(burst))
	if bk.tokens >= 1-1e-9 {
		bk.tokens--
		return 0
	}
	// Refused: come back once a token will be there, after the callers
	// refused before, each 1/rate apart.
	nextToken := now.Add(time.Duration((1 - bk.tokens) / rate * float64(time.Second)))
	if bk.next.Before(nextToken) {
		bk.next = nextToken
	}
	wait := bk.next.Sub(now)
	bk.next = bk.next.Add(time.Duration(float64(time.Second) / rate))
	return max(wait, time.Nanosecond)
}

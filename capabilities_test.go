package errand

import (
	"context"
	"errors"
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// TestUniqueAndRateLimitCheckFirst: the unique-key and rate-limit calls of
// a closed server answer ErrClosed without reaching the broker.
func TestUniqueAndRateLimitCheckFirst(t *testing.T) {
	drv := &lockCounter{Broker: memorybroker.New(nil)}
	s, err := NewServer(Config{Broker: drv, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	sig := NewSignature("t")
	sig.UniqueKey, sig.UniqueFor = "k", time.Minute
	if _, err := s.lockUnique(t.Context(), sig); !errors.Is(err, ErrClosed) || drv.locks != 0 {
		t.Fatalf("lockUnique on a closed server = %v after %d Lock calls; want ErrClosed, none", err, drv.locks)
	}
	w := &Worker{srv: s}
	tk := &task{name: "t", limit: &rateLimit{rate: 1, burst: 1}}
	if _, err := w.takeToken(t.Context(), tk, sig); !errors.Is(err, ErrClosed) || drv.takes != 0 {
		t.Fatalf("takeToken on a closed server = %v after %d Take calls; want ErrClosed, none", err, drv.takes)
	}
}

// lockCounter counts the Lock and Take calls that reach the memory broker.
type lockCounter struct {
	*memorybroker.Broker
	locks, takes int
}

func (c *lockCounter) Lock(ctx context.Context, key, id string, ttl time.Duration) (string, error) {
	c.locks++
	return c.Broker.Lock(ctx, key, id, ttl)
}

func (c *lockCounter) Take(ctx context.Context, key string, rate float64, burst int) (time.Duration, error) {
	c.takes++
	return c.Broker.Take(ctx, key, rate, burst)
}

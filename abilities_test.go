package errand

import (
	"context"
	"errors"
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// TestUseChecksFirst: an ability is called through use, which answers
// ErrClosed after Close and ctx.Err() for a done ctx without reaching the
// driver, and an unsupported error where the driver lacks the ability.
func TestUseChecksFirst(t *testing.T) {
	b := portable.WrapBroker(memorybroker.New(nil))
	called := 0
	take := func(ctx context.Context) error {
		_, err := portable.Use(ctx, b, "rate limits", func(rl driver.RateLimiter) (time.Duration, error) {
			called++
			return rl.Take(ctx, "k", 1, 1)
		})
		return err
	}
	if err := take(t.Context()); err != nil || called != 1 {
		t.Fatalf("use on a live broker = %v after %d calls; want nil after one", err, called)
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := take(done); !errors.Is(err, context.Canceled) || called != 1 {
		t.Fatalf("use with a done ctx = %v after %d driver calls; want context.Canceled without reaching the driver", err, called)
	}
	b.Close()
	if err := take(t.Context()); !errors.Is(err, ErrClosed) || called != 1 {
		t.Fatalf("use after Close = %v after %d driver calls; want ErrClosed without reaching the driver", err, called)
	}
	bare := portable.WrapBroker(struct{ driver.Broker }{memorybroker.New(nil)}) // no optional interface
	if err := portable.UseErr(t.Context(), bare, "pausing queues", func(p driver.Pauser) error { return p.Pause(t.Context(), "q") }); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("use of an ability the driver lacks = %v; want errors.ErrUnsupported", err)
	}
}

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

package portable

import (
	"context"
	"errors"
	"testing"
	"time"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// TestUseChecksFirst: a capability is called through Use, which answers
// driver.ErrClosed after Close and ctx.Err() for a done ctx without reaching the
// driver, and an unsupported error where the driver lacks the capability.
func TestUseChecksFirst(t *testing.T) {
	b := WrapBroker(memorybroker.New(nil))
	called := 0
	take := func(ctx context.Context) error {
		_, err := Use(ctx, b, "rate limits", func(rl driver.RateLimiter) (time.Duration, error) {
			called++
			return rl.Take(ctx, "k", 1, 1)
		})
		return err
	}
	if err := take(t.Context()); err != nil || called != 1 {
		t.Fatalf("Use on a live broker = %v after %d calls; want nil after one", err, called)
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := take(done); !errors.Is(err, context.Canceled) || called != 1 {
		t.Fatalf("Use with a done ctx = %v after %d driver calls; want context.Canceled without reaching the driver", err, called)
	}
	b.Close()
	if err := take(t.Context()); !errors.Is(err, driver.ErrClosed) || called != 1 {
		t.Fatalf("Use after Close = %v after %d driver calls; want driver.ErrClosed without reaching the driver", err, called)
	}
	bare := WrapBroker(struct{ driver.Broker }{memorybroker.New(nil)}) // no optional interface
	if err := UseErr(t.Context(), bare, "pausing queues", func(p driver.Pauser) error { return p.Pause(t.Context(), "q") }); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Use of a capability the driver lacks = %v; want errors.ErrUnsupported", err)
	}
}

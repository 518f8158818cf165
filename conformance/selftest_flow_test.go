package conformance

// Broken variants of the memory broker's uniqueness locks and rate limits,
// for the self-test.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// flowBroker is the memory broker with its Lock, Unlock or Take replaced.
type flowBroker struct {
	*memorybroker.Broker
	lock   func(b *flowBroker, ctx context.Context, key, id string, ttl time.Duration) (string, error)
	unlock func(b *flowBroker, ctx context.Context, key, id string) error
	take   func(b *flowBroker, ctx context.Context, key string, rate float64, burst int) (time.Duration, error)
}

func (b *flowBroker) Lock(ctx context.Context, key, id string, ttl time.Duration) (string, error) {
	if b.lock != nil {
		return b.lock(b, ctx, key, id, ttl)
	}
	return b.Broker.Lock(ctx, key, id, ttl)
}
func (b *flowBroker) Unlock(ctx context.Context, key, id string) error {
	if b.unlock != nil {
		return b.unlock(b, ctx, key, id)
	}
	return b.Broker.Unlock(ctx, key, id)
}
func (b *flowBroker) Take(ctx context.Context, key string, rate float64, burst int) (time.Duration, error) {
	if b.take != nil {
		return b.take(b, ctx, key, rate, burst)
	}
	return b.Broker.Take(ctx, key, rate, burst)
}

func brokenFlowHarness(mod func(b *flowBroker)) BrokerHarness {
	h := healthyBroker()
	h.New = func(t testing.TB) errand.Broker {
		b := &flowBroker{Broker: memorybroker.New(nil)}
		mod(b)
		t.Cleanup(func() { b.Broker.Close() })
		return b
	}
	return h
}

// brokenFlow join brokenBrokers (see init).
var brokenFlow = map[string]BrokerHarness{
	// Lock reads the holder, then writes its own ID in a second step: two
	// callers both find the key free and both take it.
	"lock-not-atomic": brokenFlowHarness(func(b *flowBroker) {
		var mu sync.Mutex
		held := map[string]string{}
		b.lock = func(_ *flowBroker, _ context.Context, key, id string, _ time.Duration) (string, error) {
			mu.Lock()
			h, ok := held[key]
			mu.Unlock()
			if ok && h != id {
				return h, nil
			}
			time.Sleep(5 * time.Millisecond) // read-modify-write in Go
			mu.Lock()
			held[key] = id
			mu.Unlock()
			return id, nil
		}
	}),
	// Unlock frees the key whoever asks.
	"unlock-ignores-holder": brokenFlowHarness(func(b *flowBroker) {
		b.unlock = func(b *flowBroker, ctx context.Context, key, _ string) error {
			holder, err := b.Broker.Lock(ctx, key, "probe", time.Nanosecond) // read the holder
			if err != nil {
				return err
			}
			return b.Broker.Unlock(ctx, key, holder)
		}
	}),
	// Unlock does nothing: a finished task keeps its key until its ttl.
	"unlock-is-a-no-op": brokenFlowHarness(func(b *flowBroker) {
		b.unlock = func(*flowBroker, context.Context, string, string) error { return nil }
	}),
	// A lock lives an hour, whatever its ttl.
	"lock-never-expires": brokenFlowHarness(func(b *flowBroker) {
		b.lock = func(b *flowBroker, ctx context.Context, key, id string, _ time.Duration) (string, error) {
			return b.Broker.Lock(ctx, key, id, time.Hour)
		}
	}),
	// Gives burst tokens per key, then refuses for ever.
	"bucket-never-refills": brokenFlowHarness(func(b *flowBroker) {
		var mu sync.Mutex
		taken := map[string]int{}
		b.take = func(_ *flowBroker, _ context.Context, key string, rate float64, burst int) (time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			if taken[key] < burst {
				taken[key]++
				return 0, nil
			}
			return time.Duration(float64(time.Second) / rate), nil
		}
	}),
	// Never refuses a token.
	"no-limit": brokenFlowHarness(func(b *flowBroker) {
		b.take = func(*flowBroker, context.Context, string, float64, int) (time.Duration, error) { return 0, nil }
	}),
}

func init() {
	for name, h := range brokenFlow {
		brokenBrokers[name] = h
	}
}

package conformance

// Broken variants of the memory broker's concurrency slots, for the
// self-test.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// slotBroker is the memory broker with its Acquire, Renew or Free replaced.
type slotBroker struct {
	*memorybroker.Broker
	acquire func(b *slotBroker, ctx context.Context, holder string, slots []driver.Slot, ttl time.Duration) (bool, error)
	renew   func(b *slotBroker, ctx context.Context, holder string, keys []string, ttl time.Duration) error
	free    func(b *slotBroker, ctx context.Context, holder string, keys []string) error
}

func (b *slotBroker) Acquire(ctx context.Context, holder string, slots []driver.Slot, ttl time.Duration) (bool, error) {
	if b.acquire != nil {
		return b.acquire(b, ctx, holder, slots, ttl)
	}
	return b.Broker.Acquire(ctx, holder, slots, ttl)
}
func (b *slotBroker) Renew(ctx context.Context, holder string, keys []string, ttl time.Duration) error {
	if b.renew != nil {
		return b.renew(b, ctx, holder, keys, ttl)
	}
	return b.Broker.Renew(ctx, holder, keys, ttl)
}
func (b *slotBroker) Free(ctx context.Context, holder string, keys []string) error {
	if b.free != nil {
		return b.free(b, ctx, holder, keys)
	}
	return b.Broker.Free(ctx, holder, keys)
}

func brokenSlotHarness(mod func(b *slotBroker)) BrokerHarness {
	h := healthyBroker()
	h.New = func(t testing.TB) errand.Broker {
		b := &slotBroker{Broker: memorybroker.New(nil)}
		mod(b)
		t.Cleanup(func() { b.Broker.Close() })
		return b
	}
	return h
}

var brokenSlots = map[string]BrokerHarness{
	// Acquire counts the holders, then adds its own in a second step:
	// racing holders all find room.
	"acquire-not-atomic": brokenSlotHarness(func(b *slotBroker) {
		var mu sync.Mutex
		held := map[string]map[string]bool{}
		b.acquire = func(_ *slotBroker, _ context.Context, holder string, slots []driver.Slot, _ time.Duration) (bool, error) {
			mu.Lock()
			for _, s := range slots {
				if n := len(held[s.Key]); n >= s.Limit && !held[s.Key][holder] {
					mu.Unlock()
					return false, nil
				}
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // read-modify-write in Go
			mu.Lock()
			defer mu.Unlock()
			for _, s := range slots {
				if held[s.Key] == nil {
					held[s.Key] = map[string]bool{}
				}
				held[s.Key][holder] = true
			}
			return true, nil
		}
		b.free = func(_ *slotBroker, _ context.Context, holder string, keys []string) error {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				delete(held[k], holder)
			}
			return nil
		}
	}),
	// A slot lives an hour, whatever its ttl.
	"slot-never-lapses": brokenSlotHarness(func(b *slotBroker) {
		b.acquire = func(b *slotBroker, ctx context.Context, holder string, slots []driver.Slot, _ time.Duration) (bool, error) {
			return b.Broker.Acquire(ctx, holder, slots, time.Hour)
		}
		b.renew = func(b *slotBroker, ctx context.Context, holder string, keys []string, _ time.Duration) error {
			return b.Broker.Renew(ctx, holder, keys, time.Hour)
		}
	}),
	// Free does nothing: a slot comes back only after its ttl.
	"free-is-a-no-op": brokenSlotHarness(func(b *slotBroker) {
		b.free = func(*slotBroker, context.Context, string, []string) error { return nil }
	}),
	// Acquire takes its keys one at a time and keeps those it took when
	// one is full.
	"acquire-keeps-partial": brokenSlotHarness(func(b *slotBroker) {
		b.acquire = func(b *slotBroker, ctx context.Context, holder string, slots []driver.Slot, ttl time.Duration) (bool, error) {
			for _, s := range slots {
				if ok, err := b.Broker.Acquire(ctx, holder, []driver.Slot{s}, ttl); !ok || err != nil {
					return false, err
				}
			}
			return true, nil
		}
	}),
	// Renew takes every slot again, lapsed or not, whoever took it since.
	"renew-revives-lapsed": brokenSlotHarness(func(b *slotBroker) {
		b.renew = func(b *slotBroker, ctx context.Context, holder string, keys []string, ttl time.Duration) error {
			for _, k := range keys {
				if _, err := b.Broker.Acquire(ctx, holder, []driver.Slot{{Key: k, Limit: 1 << 30}}, ttl); err != nil {
					return err
				}
			}
			return nil
		}
	}),
	// Acquire grants every slot, taking nothing.
	"no-concurrency-limit": brokenSlotHarness(func(b *slotBroker) {
		b.acquire = func(*slotBroker, context.Context, string, []driver.Slot, time.Duration) (bool, error) {
			return true, nil
		}
		b.renew = func(*slotBroker, context.Context, string, []string, time.Duration) error { return nil }
	}),
	// Renew does nothing: a running task's slot lapses after its lease.
	"slot-renew-is-a-no-op": brokenSlotHarness(func(b *slotBroker) {
		b.renew = func(*slotBroker, context.Context, string, []string, time.Duration) error { return nil }
	}),
	// A broker keeping concurrency limits its harness does not declare.
	"undeclared-concurrency": func() BrokerHarness {
		h := healthyBroker()
		h.Caps.Concurrency = false
		return h
	}(),
}

func init() {
	for name, h := range brokenSlots {
		brokenBrokers[name] = h
	}
	brokerTargets["Concurrency/Limit"] = "acquire-not-atomic"
	brokerTargets["Concurrency/Lapse"] = "slot-never-lapses"
	brokerTargets["Concurrency/Free"] = "free-is-a-no-op"
	brokerTargets["Concurrency/AllOrNone"] = "acquire-keeps-partial"
	brokerTargets["Concurrency/RenewLapsed"] = "renew-revives-lapsed"
	extraBrokerTargets = append(extraBrokerTargets, target{"Capabilities", "undeclared-concurrency"})
	workerTargets["Concurrency/Limit"] = "broker:no-concurrency-limit"
	extraWorkerTargets = append(extraWorkerTargets, target{"Concurrency/Limit", "broker:slot-renew-is-a-no-op"})
}

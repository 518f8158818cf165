package conformance_test

import (
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/core"
)

// memoryBroker is the harness of the embedded broker.
func memoryBroker(opts memorybroker.Options) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) core.Broker {
			b := memorybroker.New(&opts)
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{
			MaxPayload: opts.MaxPayload, OrderedByETA: true,
			Inspect: true, DeadLetters: true, Purge: true, Stats: true,
		},
		Timing: conformance.Timing{Lease: 100 * time.Millisecond, Delay: 100 * time.Millisecond, DelayBound: 50 * time.Millisecond},
	}
}

func memoryBackend() conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) core.Backend {
			b := memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, Waiter: true, MinExpiry: 50 * time.Millisecond},
	}
}

func TestMemoryBroker(t *testing.T) {
	t.Parallel()
	conformance.RunBroker(t, memoryBroker(memorybroker.Options{}))
}

func TestMemoryBrokerWithPayloadLimit(t *testing.T) {
	t.Parallel()
	conformance.RunBroker(t, memoryBroker(memorybroker.Options{MaxPayload: 4096}))
}

func TestMemoryBackend(t *testing.T) {
	t.Parallel()
	conformance.RunBackend(t, memoryBackend())
}

func TestMemoryWorker(t *testing.T) {
	t.Parallel()
	conformance.RunWorker(t, memoryBroker(memorybroker.Options{}), memoryBackend())
}

func BenchmarkMemoryBroker(b *testing.B) {
	conformance.BenchmarkBroker(b, memoryBroker(memorybroker.Options{}))
}

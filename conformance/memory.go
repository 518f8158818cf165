package conformance

import (
	"os"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// MemoryBroker is the harness of errand's in-memory broker, for pairing
// with a backend under test in RunWorker (and the kit's own reference).
func MemoryBroker(opts memorybroker.Options) BrokerHarness {
	return BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := memorybroker.New(&opts)
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: BrokerCaps{
			MaxPayload: opts.MaxPayload, OrderedByETA: true, DetectsLostLease: true,
			Inspect: true, DeadLetters: true, Purge: true, Stats: true, BatchAck: true,
		},
		Timing: Timing{Lease: 100 * time.Millisecond, Delay: 100 * time.Millisecond, DelayBound: 50 * time.Millisecond},
	}
}

// MemoryBackend is the harness of errand's in-memory result backend, for
// pairing with a broker under test in RunWorker.
func MemoryBackend() BackendHarness {
	return BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: BackendCaps{Expiry: true, Waiter: true, MinExpiry: 50 * time.Millisecond},
	}
}

// RequireServicesEnv makes a driver test that cannot reach its server fail
// instead of skip, when set to 1 (CI sets it).
const RequireServicesEnv = "ERRAND_REQUIRE_SERVICES"

// ServiceUnavailable ends a driver test whose server is missing or
// unreachable: it fails when ERRAND_REQUIRE_SERVICES=1 and skips, with the
// reason, otherwise.
func ServiceUnavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireServicesEnv) == "1" {
		t.Fatalf("required service unavailable (%s=1): %s", RequireServicesEnv, why)
	}
	t.Skip("skipping: " + why)
}

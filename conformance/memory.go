package conformance

import (
	"context"
	"fmt"
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
			MaxPayload: opts.MaxPayload, OrderedByETA: true, DetectsLostLease: true, Priority: true,
			Purge: true, Stats: true,
			Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true, Schedules: true,
			Unique: true, RateLimit: true, Colocate: true, Tx: true, CancelNotify: true,
		},
		Timing:  Timing{Lease: 100 * time.Millisecond, Delay: 100 * time.Millisecond, DelayBound: 50 * time.Millisecond},
		PushRaw: pushRawMemory,
		BeginTx: beginMemoryTx,
	}
}

// beginMemoryTx is the memory broker's BeginTx: a *memorybroker.Tx begun
// on b (or on the memory broker b wraps, which promotes Begin).
func beginMemoryTx(t testing.TB, b errand.Broker) (any, func() error, func() error) {
	t.Helper()
	m, ok := b.(interface{ Begin() *memorybroker.Tx })
	if !ok {
		t.Fatalf("BeginTx: %T is no memory broker (it has no Begin)", b)
	}
	tx := m.Begin()
	return tx, tx.Commit, tx.Rollback
}

// pushRawMemory is the memory broker's raw path (BrokerHarness.PushRaw): it
// has no other way in than Publish, so it publishes the bytes as the body,
// unencoded.
func pushRawMemory(t testing.TB, b errand.Broker, queue string, raw []byte) bool {
	t.Helper()
	m := errand.Message{ID: fmt.Sprintf("%s-raw-%d", runID, seq.Add(1)), Queue: queue, Body: raw}
	if err := b.Publish(context.Background(), m); err != nil {
		t.Fatalf("PushRaw: publish foreign bytes to the memory broker: %v", err)
	}
	return true
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
		Caps: BackendCaps{Expiry: true, Waiter: true, Start: true, PendingIfAbsent: true, Located: true, Tx: true, Cancel: true, MinExpiry: 50 * time.Millisecond},
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

package conformance_test

import (
	"testing"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
)

func TestMemoryBroker(t *testing.T) {
	t.Parallel()
	conformance.RunBroker(t, conformance.MemoryBroker(memorybroker.Options{}))
}

func TestMemoryBrokerWithPayloadLimit(t *testing.T) {
	t.Parallel()
	conformance.RunBroker(t, conformance.MemoryBroker(memorybroker.Options{MaxPayload: 4096}))
}

func TestMemoryBackend(t *testing.T) {
	t.Parallel()
	conformance.RunBackend(t, conformance.MemoryBackend())
}

func TestMemoryWorker(t *testing.T) {
	t.Parallel()
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), conformance.MemoryBackend())
}

// TestMemoryCarrierWorker runs the worker cases on a memory broker that
// carries the memory backend's PENDING writes (driver.PendingCarrier, a
// test-only pair of the kit's: selftest_carry_test.go), so
// Send/CarriedPending checks a correct carrier, not just logs.
func TestMemoryCarrierWorker(t *testing.T) {
	t.Parallel()
	broker, backend := conformance.MemoryCarrierPair()
	conformance.RunWorker(t, broker, backend)
}

func BenchmarkMemoryBroker(b *testing.B) {
	conformance.BenchmarkBroker(b, conformance.MemoryBroker(memorybroker.Options{}))
}

func BenchmarkMemoryWorker(b *testing.B) {
	conformance.BenchmarkWorker(b, conformance.MemoryBroker(memorybroker.Options{}), conformance.MemoryBackend())
}

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

// TestMemoryWorker runs the worker cases on the memory drivers, which are
// co-located (driver.Colocator): the Worker/Colocation cases check the
// memory broker's one-trip calls on every run.
func TestMemoryWorker(t *testing.T) {
	t.Parallel()
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), conformance.MemoryBackend())
}

func BenchmarkMemoryBroker(b *testing.B) {
	conformance.BenchmarkBroker(b, conformance.MemoryBroker(memorybroker.Options{}))
}

func BenchmarkMemoryWorker(b *testing.B) {
	conformance.BenchmarkWorker(b, conformance.MemoryBroker(memorybroker.Options{}), conformance.MemoryBackend())
}

package postgresbackend_test

import (
	"testing"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// BenchmarkWorker drains no-op tasks from the memory broker with the
// PostgreSQL backend and reports the backend's calls per task.
func BenchmarkWorker(b *testing.B) {
	conformance.BenchmarkWorker(b, conformance.MemoryBroker(memorybroker.Options{}), harness(b, pgdbtest.Pool(b), nil))
}

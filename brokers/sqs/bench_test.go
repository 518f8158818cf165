package sqsbroker_test

import (
	"testing"

	"github.com/errand-go/errand/conformance"
)

// BenchmarkWorker drains no-op tasks from the SQS broker (standard queue)
// into the memory backend and reports the broker's calls per task.
func BenchmarkWorker(b *testing.B) {
	conformance.BenchmarkWorker(b, harness(client(b), false), conformance.MemoryBackend())
}

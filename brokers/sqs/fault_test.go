package sqsbroker_test

// The kit's worker-killed scenario with real processes: a worker process
// SIGKILLed mid-task; every task completes after the visibility timeout,
// none lost. (fauxqs keeps its queues in memory, so there is no restart
// scenario: SQS itself is the durable part.)

import (
	"testing"

	"github.com/errand-go/errand/conformance"
)

// TestWorkerKilled re-runs this test binary as worker processes (see
// conformance.RunWorkerKilled): everything here runs in them too.
func TestWorkerKilled(t *testing.T) {
	c := client(t)
	t.Run("Standard", func(t *testing.T) { t.Parallel(); conformance.RunWorkerKilled(t, harness(c, false)) })
	t.Run("FIFO", func(t *testing.T) { t.Parallel(); conformance.RunWorkerKilled(t, harness(c, true)) })
}

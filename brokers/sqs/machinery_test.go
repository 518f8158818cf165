package sqsbroker_test

import (
	"testing"

	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
)

// TestMachineryConformance runs the kit's broker and worker cases on the
// broker in machinery's format (Options.Machinery: queue names as they
// are, machinery's JSON).
func TestMachineryConformance(t *testing.T) {
	t.Parallel()
	c := client(t)
	h := harnessOf(c, &sqsbroker.Options{Machinery: true, MaxHop: hop})
	conformance.RunBroker(t, h)
	conformance.RunWorker(t, h, conformance.MemoryBackend())
}

package sqsbroker_test

import (
	"net/url"
	"os"
	"testing"

	"github.com/errand-go/errand"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
)

// TestShutdownWhileServerSilent: a worker's Shutdown returns by its deadline
// while the SQS endpoint accepts but never answers (a proxy that stops
// forwarding), and its tasks are finished by another worker afterwards.
func TestShutdownWhileServerSilent(t *testing.T) {
	client(t) // skips or fails when the endpoint is unreachable
	ep, err := url.Parse(os.Getenv("ERRAND_SQS_ENDPOINT"))
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunShutdownSilentServer(t, conformance.SilentServerHarness{
		Target: ep.Host,
		Broker: func(t testing.TB, addr string) errand.Broker {
			b := sqsbroker.New(newClient("http://"+addr), &sqsbroker.Options{QueuePrefix: "errand-test-"})
			t.Cleanup(func() { b.Close() })
			return b
		},
	})
}

package sqsbroker_test

import (
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/errand-go/errand"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
)

// TestSilentServer: with the SQS endpoint accepting connections but never
// answering (a stalled proxy), every broker call, and OpenBroker, returns an
// error by its ctx deadline, or within Options.CallTimeout without one
// (issue 14, item 2: before, a send without a deadline blocked for ever and
// OpenBroker made no call at all).
func TestSilentServer(t *testing.T) {
	client(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ep, err := url.Parse(os.Getenv("ERRAND_SQS_ENDPOINT"))
	if err != nil {
		t.Fatal(err)
	}
	const callTimeout = 3 * time.Second
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: ep.Host,
		Broker: func(t testing.TB, addr string) errand.Broker {
			b := sqsbroker.New(newClient("http://"+addr), &sqsbroker.Options{QueuePrefix: "errand-test-", CallTimeout: callTimeout})
			t.Cleanup(func() { b.Close() })
			return b
		},
		BrokerURL: func(addr string) string {
			return "sqs://" + addr + "?region=us-east-1&insecure=1&prefix=errand-test-&timeout=" + callTimeout.String()
		},
		CallTimeout: callTimeout,
		// A receive is never cancelled mid-poll: Fetch returns after the
		// current one-second poll, plus a second.
		Slack: 2500 * time.Millisecond,
	})
}

package sqsbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/errand-go/errand"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// client returns an SQS client for ERRAND_SQS_ENDPOINT (fauxqs from
// scripts/services, LocalStack, or AWS), with fixed test credentials.
func client(t testing.TB) *awssqs.Client {
	ep := os.Getenv("ERRAND_SQS_ENDPOINT")
	if ep == "" {
		conformance.ServiceUnavailable(t, "ERRAND_SQS_ENDPOINT is not set (scripts/services start exports it)")
	}
	if _, err := http.Get(ep); err != nil {
		conformance.ServiceUnavailable(t, "SQS endpoint unreachable: "+err.Error())
	}
	return newClient(ep)
}

func newClient(endpoint string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, sqsbroker.RequestBodyWorkaround)
}

const hop = 2 * time.Second

func harness(c *awssqs.Client, fifo bool) conformance.BrokerHarness {
	return harnessOf(c, &sqsbroker.Options{QueuePrefix: "errand-test-", MaxHop: hop, FIFO: fifo})
}

func harnessOf(c *awssqs.Client, opts *sqsbroker.Options) conformance.BrokerHarness {
	fifo := opts.FIFO
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := sqsbroker.New(c, opts)
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{MaxPayload: 256*1024 - 1024, MaxDelay: hop, Purge: true, Stats: true, Queues: true},
		// SQS counts delays and visibility timeouts in whole seconds, and a
		// receive is never cancelled mid-poll (1s), so leases are seconds long.
		Timing: conformance.Timing{Lease: 3 * time.Second, Delay: time.Second, DelayBound: 1500 * time.Millisecond, Prompt: 2 * time.Second},
		// Foreign bytes arrive as another program would send them: a
		// SendMessage with the SDK, without errand's attributes (no
		// errand-id: the delivery's ID is SQS's MessageId). SQS refuses an
		// empty body.
		PushRaw: func(t testing.TB, b errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			if len(raw) == 0 {
				return false
			}
			ctx := context.Background()
			u, err := b.(*sqsbroker.Broker).QueueURL(ctx, queue)
			if err != nil {
				t.Fatalf("PushRaw: queue URL: %v", err)
			}
			in := &awssqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(string(raw))}
			if fifo {
				in.MessageGroupId = aws.String("raw")
				in.MessageDeduplicationId = aws.String(rand.Text())
			}
			if _, err := c.SendMessage(ctx, in); err != nil {
				t.Fatalf("PushRaw: SendMessage: %v", err)
			}
			return true
		},
	}
}

// The standard and FIFO suites run side by side: their cases wait on
// leases and delays of seconds, not on the CPU.
func TestConformance(t *testing.T) {
	t.Parallel()
	c := client(t)
	conformance.RunBroker(t, harness(c, false))
	conformance.RunWorker(t, harness(c, false), conformance.MemoryBackend())
}

func TestConformanceFIFO(t *testing.T) {
	t.Parallel()
	c := client(t)
	conformance.RunBroker(t, harness(c, true))
	conformance.RunWorker(t, harness(c, true), conformance.MemoryBackend())
}

func TestOpenByURL(t *testing.T) {
	client(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ep := strings.TrimPrefix(os.Getenv("ERRAND_SQS_ENDPOINT"), "http://")
	b, err := errand.OpenBroker(context.Background(), "sqs://"+ep+"?region=us-east-1&insecure=1&prefix=errand-url-&max_hop=1m")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if l := b.(driver.Limiter).Limits(); l.MaxDelay != time.Minute {
		t.Fatalf("max_hop=1m gave MaxDelay %v", l.MaxDelay)
	}
	ctx := context.Background()
	q := "url-" + rand.Text()[:8]
	if err := b.Publish(ctx, errand.Message{ID: "m", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Fetch(ctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "m" {
		t.Fatalf("fetch through a URL-opened broker: %v, %v", ds, err)
	}
	if err := errors.Join(b.Ack(ctx, ds[:1])...); err != nil {
		t.Fatal(err)
	}
}

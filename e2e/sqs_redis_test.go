package e2e_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
)

// Cross-driver end-to-end tests live in this test-only module, so that no
// driver module requires another.

func sqsClient(t testing.TB) *awssqs.Client {
	ep := os.Getenv("ERRAND_SQS_ENDPOINT")
	if ep == "" {
		conformance.ServiceUnavailable(t, "ERRAND_SQS_ENDPOINT is not set (scripts/services start exports it)")
	}
	if _, err := http.Get(ep); err != nil {
		conformance.ServiceUnavailable(t, "SQS endpoint unreachable: "+err.Error())
	}
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ep),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, sqsbroker.RequestBodyWorkaround)
}

func redisClient(t testing.TB) goredis.UniversalClient {
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL is not set")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		conformance.ServiceUnavailable(t, "Redis unreachable: "+err.Error())
	}
	return rdb
}

// TestSQSBrokerWithRedisBackend runs the end-to-end cases on the SQS broker
// with the Redis result backend.
func TestSQSBrokerWithRedisBackend(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	rdb := redisClient(t)
	broker := conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: "errand-e2e-", MaxHop: 2 * time.Second})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps:   conformance.BrokerCaps{MaxPayload: 256*1024 - 1024, MaxDelay: 2 * time.Second, Purge: true, Stats: true, Queues: true},
		Timing: conformance.Timing{Lease: 3 * time.Second, Delay: time.Second, DelayBound: 1500 * time.Millisecond, Prompt: 2 * time.Second},
	}
	backend := conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-e2e", ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Start: true, PendingIfAbsent: true, Located: true, Cancel: true},
	}
	conformance.RunWorker(t, broker, backend)
}

package e2e_test

import (
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
)

func amqpURL(t testing.TB) string {
	u := os.Getenv("ERRAND_AMQP_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_AMQP_URL is not set (scripts/services start exports it)")
	}
	c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		conformance.ServiceUnavailable(t, "RabbitMQ unreachable: "+err.Error())
	}
	c.Close()
	return u
}

// TestAMQPBrokerWithRedisBackend runs the worker cases of the kit on the
// AMQP broker (quorum queues) with the Redis result backend.
func TestAMQPBrokerWithRedisBackend(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	rdb := redisClient(t)
	const maxDelay = 1024 * time.Millisecond
	broker := conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := amqpbroker.New(u, &amqpbroker.Options{QueuePrefix: "errand-e2e.", MaxDelay: maxDelay, MaxPayload: 1 << 20})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps:   conformance.BrokerCaps{MaxPayload: 1 << 20, MaxDelay: maxDelay, DetectsLostLease: true, Durable: true, Purge: true, Stats: true, Archive: true, Pause: true},
		Timing: conformance.Timing{Lease: time.Second, Delay: 500 * time.Millisecond, DelayBound: 400 * time.Millisecond, Prompt: 2 * time.Second},
	}
	backend := conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-e2e-amqp", ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Start: true, PendingIfAbsent: true, Located: true, Cancel: true},
	}
	conformance.RunWorker(t, broker, backend)
}

package amqpbroker_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// amqpURL returns ERRAND_AMQP_URL (the private node of scripts/services, or
// a user's RabbitMQ) once a connection to it opens.
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

// testMaxDelay keeps the delay levels short (64ms to 1.024s) so the kit's
// 1.5×MaxDelay case hops through the longest level.
const testMaxDelay = 1024 * time.Millisecond

func harness(url string, opts amqpbroker.Options) conformance.BrokerHarness {
	opts.MaxDelay = testMaxDelay
	if os.Getenv("ERRAND_AMQP_DEBUG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.QueuePrefix == "" {
		opts.QueuePrefix = "errand-test."
	}
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			o := opts
			b := amqpbroker.New(url, &o)
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{
			MaxPayload: 1 << 20, MaxDelay: testMaxDelay,
			Priority: opts.Classic && opts.MaxPriority > 0, DetectsLostLease: true, Durable: true,
			Purge: true, Stats: true, Archive: true, Pause: true,
		},
		Timing: conformance.Timing{Lease: time.Second, Delay: 500 * time.Millisecond, DelayBound: 400 * time.Millisecond, Prompt: 2 * time.Second},
		PushRaw: func(t testing.TB, b errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			if err := amqpbroker.PushRaw(context.Background(), b.(*amqpbroker.Broker), queue, raw); err != nil {
				t.Fatalf("PushRaw: %v", err)
			}
			return true
		},
	}
}

// The suites (quorum, classic, machinery's format) run side by side:
// their cases wait on leases and delays, not on the CPU.
func TestConformance(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	h := harness(u, amqpbroker.Options{MaxPayload: 1 << 20})
	conformance.RunBroker(t, h)
	conformance.RunWorker(t, h, conformance.MemoryBackend())
}

// TestConformanceClassic runs the kit on classic queues with priorities.
func TestConformanceClassic(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	h := harness(u, amqpbroker.Options{MaxPayload: 1 << 20, Classic: true, MaxPriority: 9, QueuePrefix: "errand-test-classic."})
	conformance.RunBroker(t, h)
	conformance.RunWorker(t, h, conformance.MemoryBackend())
}

// TestOpenByURL: errand's parameters are read off the URL (and taken off
// it before amqp091 sees it), and a broker opened by URL carries messages.
func TestOpenByURL(t *testing.T) {
	u := amqpURL(t)
	ctx := context.Background()
	b, err := errand.OpenBroker(ctx, u+"?prefix=errand-url.&max_delay=1s&queue_type=classic&max_priority=5&max_payload=4096&timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if l := b.(driver.Limiter).Limits(); l.MaxDelay != 512*time.Millisecond || l.MaxPayload != 4096 {
		t.Fatalf("max_delay=1s, max_payload=4096 gave Limits %+v; want the longest level under 1s (512ms) and 4096", l)
	}
	q := "url-" + time.Now().Format("150405.000000")
	if err := b.Publish(ctx, errand.Message{ID: "m", Queue: q, Body: []byte("x"), Priority: 3}); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "m" || ds[0].Priority != 3 {
		t.Fatalf("fetch through a URL-opened broker: %v, %v", ds, err)
	}
	if err := errors.Join(b.Ack(ctx, ds)...); err != nil {
		t.Fatal(err)
	}
	if _, err := errand.OpenBroker(ctx, u+"?queue_type=stream"); err == nil || !strings.Contains(err.Error(), "queue_type") {
		t.Fatalf("queue_type=stream: want an error naming the parameter, got %v", err)
	}
}

package amqpbroker_test

// The kit's fault scenarios on real processes: a worker process SIGKILLed
// mid-task (on the shared node), a private node restarted mid-chord, a
// silent server; and the broker's own: connections and channels lost and
// reopened, and a connection RabbitMQ blocks under a memory alarm.

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
)

// TestWorkerKilled re-runs this test binary as worker processes (see
// conformance.RunWorkerKilled): everything here runs in them too.
func TestWorkerKilled(t *testing.T) {
	conformance.RunWorkerKilled(t, harness(amqpURL(t), amqpbroker.Options{}))
}

// TestServerRestart stops a private node (SIGTERM) while a chord runs and
// starts it again on the same data directory: queues are durable (quorum)
// and messages persistent, so nothing may be lost.
func TestServerRestart(t *testing.T) {
	n := startNode(t)
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   harness(n.url, amqpbroker.Options{}),
		Backend:  conformance.MemoryBackend(),
		Restarts: conformance.RestartsBroker,
		Stop:     n.proc.Stop,
		Start:    n.proc.Start,
	})
}

// TestSilentServer: with RabbitMQ accepting connections but never
// answering (a stalled proxy), every broker call, and OpenBroker, returns
// an error by its ctx deadline, or within Options.CallTimeout without one.
func TestSilentServer(t *testing.T) {
	u, err := url.Parse(amqpURL(t))
	if err != nil {
		t.Fatal(err)
	}
	const callTimeout = 2 * time.Second
	at := func(addr string) string { v := *u; v.Host = addr; return v.String() }
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: u.Host,
		Broker: func(t testing.TB, addr string) errand.Broker {
			b := amqpbroker.New(at(addr), &amqpbroker.Options{QueuePrefix: "errand-test.", CallTimeout: callTimeout})
			t.Cleanup(func() { b.Close() })
			return b
		},
		BrokerURL: func(addr string) string {
			return at(addr) + "?prefix=errand-test.&timeout=" + callTimeout.String()
		},
		CallTimeout: callTimeout,
		Slack:       time.Second,
	})
}

// TestShutdownSilentServer: a worker's Shutdown keeps its deadline while
// RabbitMQ is silent, with tasks running or their acks hanging.
func TestShutdownSilentServer(t *testing.T) {
	u, err := url.Parse(amqpURL(t))
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunShutdownSilentServer(t, conformance.SilentServerHarness{
		Target: u.Host,
		Broker: func(t testing.TB, addr string) errand.Broker {
			v := *u
			v.Host = addr
			b := amqpbroker.New(v.String(), &amqpbroker.Options{QueuePrefix: "errand-test.", CallTimeout: 2 * time.Second})
			t.Cleanup(func() { b.Close() })
			return b
		},
	})
}

// TestBlocked: under a memory alarm RabbitMQ blocks publishing
// connections. Publish reports it (ErrBlocked, naming the reason) within
// CallTimeout instead of hanging, while deliveries and acks go on (they
// use the other connection); once the alarm clears, publishing works again.
func TestBlocked(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	const callTimeout = 2 * time.Second
	b := amqpbroker.New(n.url, &amqpbroker.Options{CallTimeout: callTimeout})
	defer b.Close()
	q := "blocked-" + time.Now().Format("150405.000")
	if err := b.Publish(ctx, errand.Message{ID: "before", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	n.ctl(t, "set_vm_memory_high_watermark", "0.000001")
	defer n.ctl(t, "set_vm_memory_high_watermark", "0.4")
	start := time.Now()
	err := b.Publish(ctx, errand.Message{ID: "during", Queue: q, Body: []byte("x")})
	if !errors.Is(err, amqpbroker.ErrBlocked) {
		t.Fatalf("blocked promise broken: Publish under a memory alarm returned %v after %v; want ErrBlocked", err, time.Since(start))
	}
	if took := time.Since(start); took > callTimeout+time.Second {
		t.Fatalf("blocked promise broken: Publish took %v to report the block (CallTimeout %v)", took, callTimeout)
	}
	t.Logf("Publish under the alarm: %v (after %v)", err, time.Since(start))
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "before" {
		t.Fatalf("a consumer under a memory alarm: Fetch = %v, %v; want the message published before", ds, err)
	}
	if err := errors.Join(b.Ack(ctx, ds)...); err != nil {
		t.Fatalf("Ack under a memory alarm: %v", err)
	}
	n.ctl(t, "set_vm_memory_high_watermark", "0.4")
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := b.Publish(ctx, errand.Message{ID: "after", Queue: q, Body: []byte("x")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish after the alarm cleared: %v", err)
		}
	}
}

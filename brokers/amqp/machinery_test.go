package amqpbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// machineryOpts are the test's machinery options: its own exchange and
// default queue, so no test shares machinery's real names.
func machineryOpts() *amqpbroker.MachineryOptions {
	return &amqpbroker.MachineryOptions{Exchange: "errand-test-mexchange", DefaultQueue: "errand-test-mdefault", BindingKey: "errand-test-mbinding"}
}

// TestMachineryConformance runs the kit's broker and worker cases on the
// broker in machinery's AMQP format (Options.Machinery: machinery's
// exchange, classic queues named as they are, machinery's JSON, delay
// queues dead-lettering to the exchange).
func TestMachineryConformance(t *testing.T) {
	t.Parallel()
	u := amqpURL(t)
	h := harness(u, amqpbroker.Options{MaxPayload: 1 << 20, Machinery: machineryOpts()})
	conformance.RunBroker(t, h)
	conformance.RunWorker(t, h, conformance.MemoryBackend())
}

// TestMachineryWireFormat: a task machinery's producer publishes (its JSON
// to machinery's exchange with the routing key, no message-id) is taken
// by errand with the task's UUID as its ID, and what errand publishes
// lands in machinery's queue through machinery's exchange as machinery's
// JSON with its RoutingKey set, readable by a plain consumer of the queue.
func TestMachineryWireFormat(t *testing.T) {
	u := amqpURL(t)
	ctx := context.Background()
	q := "errand-test-mwire-" + rand.Text()
	b := amqpbroker.New(u, &amqpbroker.Options{Machinery: machineryOpts(), MaxDelay: testMaxDelay})
	defer b.Close()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(q, false, false, false)
	defer ch.QueueDelete(q+".dead", false, false, false)
	// errand declares and binds the queue on its first Fetch; machinery's
	// producer declares the same (durable, classic, bound by its name).
	fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	b.Fetch(fctx, q, 1, time.Minute)
	cancel()
	body := `{"UUID":"task_m1","Name":"add","RoutingKey":"` + q + `","Args":[{"Type":"int64","Value":1}]}`
	if err := ch.Publish("errand-test-mexchange", q, false, false, amqp.Publishing{ContentType: "application/json", Body: []byte(body), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	fctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	cancel()
	if err != nil || len(ds) != 1 || ds[0].ID != "task_m1" || ds[0].Attempt != 1 {
		t.Fatalf("fetch of machinery's task: %v, %v; want task_m1, delivery 1", ds, err)
	}
	if err := errors.Join(b.Ack(ctx, ds)...); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, errand.Message{ID: "e1", Queue: q, Body: []byte(`{"UUID":"e1","Name":"t","RoutingKey":""}`)}); err != nil {
		t.Fatal(err)
	}
	var got amqp.Delivery
	for deadline := time.Now().Add(10 * time.Second); ; {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = d
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("errand's publish never reached machinery's queue")
		}
		time.Sleep(20 * time.Millisecond) // polling a queue with basic.get: no event to wait on
	}
	var s struct{ UUID, Name, RoutingKey string }
	if err := json.Unmarshal(got.Body, &s); err != nil || s.UUID != "e1" || s.RoutingKey != q || got.ContentType != "application/json" {
		t.Errorf("machinery's queue holds %s (%s), want machinery's JSON of e1 with RoutingKey %s", got.Body, got.ContentType, q)
	}
}

// TestMachineryETANeverEarly: a task machinery's producer delayed (its ETA
// in the body; machinery's delay queue TTL truncated to the millisecond,
// or here no delay queue at all) is not handed out before its ETA.
func TestMachineryETANeverEarly(t *testing.T) {
	u := amqpURL(t)
	ctx := context.Background()
	q := "errand-test-meta-" + rand.Text()
	b := amqpbroker.New(u, &amqpbroker.Options{Machinery: machineryOpts(), MaxDelay: testMaxDelay})
	defer b.Close()
	defer func() {
		if conn, err := amqp.Dial(u); err == nil {
			if ch, err := conn.Channel(); err == nil {
				ch.QueueDelete(q, false, false, false)
				ch.QueueDelete(q+".dead", false, false, false)
			}
			conn.Close()
		}
	}()
	fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	b.Fetch(fctx, q, 1, time.Minute)
	cancel()
	eta := time.Now().Add(1500 * time.Millisecond).UTC()
	raw, _ := json.Marshal(map[string]any{"UUID": "task_eta", "Name": "t", "RoutingKey": q, "ETA": eta})
	if err := amqpbroker.PushRaw(ctx, b, q, raw); err != nil {
		t.Fatal(err)
	}
	fctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "task_eta" {
		t.Fatalf("fetch: %v, %v", ds, err)
	}
	if now := time.Now(); now.Before(eta) {
		t.Errorf("task handed out at %v, before its machinery ETA %v: never early", now, eta)
	}
	b.Ack(ctx, ds)
}

// TestMachineryOpenByURL: format=machinery and machinery's AMQP settings
// are read off the URL.
func TestMachineryOpenByURL(t *testing.T) {
	u := amqpURL(t)
	ctx := context.Background()
	b, err := errand.OpenBroker(ctx, u+`?format=machinery&exchange=errand-test-mexchange&exchange_type=direct&binding_key=errand-test-mbinding&default_queue=errand-test-mdefault&prefetch=3`)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q := "errand-test-murl-" + rand.Text()
	if err := b.Publish(ctx, errand.Message{ID: "m", Queue: q, Body: []byte(`{"UUID":"m","Name":"t"}`)}); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "m" {
		t.Fatalf("fetch through a format=machinery broker: %v, %v", ds, err)
	}
	var s struct{ RoutingKey string }
	if json.Unmarshal(ds[0].Body, &s); s.RoutingKey != q {
		t.Errorf("body %s: want machinery's RoutingKey %s", ds[0].Body, q)
	}
	b.Ack(ctx, ds)
	if p, ok := b.(driver.Purger); ok {
		p.Purge(ctx, q)
	}
	if _, err := errand.OpenBroker(ctx, u+"?format=celery"); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("format=celery: %v, want an error naming the format", err)
	}
}

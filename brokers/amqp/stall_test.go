package amqpbroker_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// TestConsumeAfterSilence: RabbitMQ stops answering while a Fetch restarts
// the queue's consumer (a larger prefetch), longer than CallTimeout, and
// then answers again. The consumer RabbitMQ registers late must be read
// like any other: messages it is pushed are fetched, not held unacked on
// the channel for as long as the broker lives.
func TestConsumeAfterSilence(t *testing.T) {
	u, err := url.Parse(amqpURL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := conformance.NewProxy(t, u.Host)
	u.Host = px.Addr()
	const callTimeout = time.Second
	b := amqpbroker.New(u.String(), &amqpbroker.Options{QueuePrefix: "errand-test.", CallTimeout: callTimeout, Heartbeat: time.Minute, Logger: testLogger()})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := fmt.Sprintf("stall-%d", time.Now().UnixNano())
	if err := b.Publish(ctx, errand.Message{ID: "m0", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(b.Ack(ctx, fetchN(t, ctx, b, q, 1))...); err != nil {
		t.Fatal(err)
	}

	px.Stall()
	fctx, fcancel := context.WithTimeout(ctx, 3*callTimeout)
	ds, err := b.Fetch(fctx, q, 4, time.Minute) // restarts the consumer: prefetch 3 → 12
	fcancel()
	if err == nil {
		t.Fatalf("Fetch while RabbitMQ is silent returned %d deliveries", len(ds))
	}
	px.Resume()

	const n = 4
	for i := range n {
		if err := b.Publish(ctx, errand.Message{ID: fmt.Sprint("m", i+1), Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	deadline := time.Now().Add(15 * time.Second)
	for len(got) < n {
		fctx, fcancel := context.WithDeadline(ctx, deadline)
		ds, err := b.Fetch(fctx, q, n-len(got), time.Minute)
		fcancel()
		if errors.Is(err, context.DeadlineExceeded) && time.Now().After(deadline) {
			t.Fatalf("at-least-once promise broken: after RabbitMQ answered again only %d of %d messages were fetched (%v): the rest are held by a consumer the broker does not read", len(got), n, got)
		}
		for _, d := range ds {
			got[d.ID] = true
			if err := errors.Join(b.Ack(ctx, []*driver.Delivery{d})...); err != nil {
				t.Logf("ack %s: %v", d.ID, err)
			}
		}
	}
}

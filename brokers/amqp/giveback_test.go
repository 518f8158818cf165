package amqpbroker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/driver"
)

// TestGiveBackNotADelivery: messages a consumer was pushed but no Fetch
// took are given back when no Fetch comes for HoldBuffered; they never
// ran, so a give-back must not count as a delivery. Each round fetches one
// message and lets the consumer give the rest back, so the message fetched
// last was given back n-1 times: every message must still report Attempt
// 1 (on a quorum queue a requeue adds to x-delivery-count, on a classic
// one it sets the redelivered flag).
func TestGiveBackNotADelivery(t *testing.T) {
	for _, classic := range []bool{false, true} {
		t.Run(fmt.Sprint("classic=", classic), func(t *testing.T) {
			const n = 4
			b := amqpbroker.New(amqpURL(t), &amqpbroker.Options{QueuePrefix: "errand-test-giveback.", Classic: classic, Prefetch: n, HoldBuffered: 50 * time.Millisecond, Logger: testLogger()})
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			q := fmt.Sprintf("giveback-%d", time.Now().UnixNano())
			for i := range n {
				if err := b.Publish(ctx, errand.Message{ID: fmt.Sprint("m", i), Queue: q, Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]int{}
			for len(got) < n {
				d := fetchN(t, ctx, b, q, 1)[0]
				if _, dup := got[d.ID]; dup {
					t.Fatalf("%s fetched twice", d.ID)
				}
				got[d.ID] = d.Attempt
				if len(got) < n {
					// Wait for the consumer to give the rest back.
					deadline := time.Now().Add(10 * time.Second)
					for {
						if nb, consuming := amqpbroker.Buffered(b, q); nb == 0 && !consuming {
							break
						}
						if time.Now().After(deadline) {
							t.Fatal("the consumer did not give its buffered messages back")
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
				if err := errors.Join(b.Ack(ctx, []*driver.Delivery{d})...); err != nil {
					t.Fatal(err)
				}
			}
			for id, a := range got {
				if a != 1 {
					t.Errorf("%s ran first with Attempt %d, want 1: give-backs of a message that never ran counted as deliveries (all: %v)", id, a, got)
				}
			}
		})
	}
}

package amqpbroker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
)

// publishN publishes n messages m0..m(n-1) to q.
func publishN(t *testing.T, ctx context.Context, b *amqpbroker.Broker, q string, n int) {
	t.Helper()
	for i := range n {
		if err := b.Publish(ctx, errand.Message{ID: fmt.Sprint("m", i), Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitBuffered polls until q's consumer holds want messages buffered.
func waitBuffered(t *testing.T, b *amqpbroker.Broker, q string, want int, why string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, _ := amqpbroker.Buffered(b, q)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the consumer holds %d messages buffered, want %d", why, n, want)
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not a wait for the event
	}
}

// TestPrefetchWindow: with the default PrefetchMultiplier (3), a queue's
// consumer has a window of three times the worker's slots, so deliveries
// a worker still settles (leased, not yet acked) do not hold back the next
// ones: RabbitMQ pushes them ahead, and they wait buffered, leased to no
// one, for the next Fetch. The window is a bound: RabbitMQ sends no more
// than it.
func TestPrefetchWindow(t *testing.T) {
	const slots = 4
	b := amqpbroker.New(amqpURL(t), &amqpbroker.Options{QueuePrefix: "errand-test-window.", Logger: testLogger()})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := fmt.Sprintf("window-%d", time.Now().UnixNano())
	publishN(t, ctx, b, q, 4*slots)

	settling := fetchN(t, ctx, b, q, slots) // a worker's slots' worth, not acked
	if _, prefetch := amqpbroker.Consumer(b, q); prefetch != 3*slots {
		t.Fatalf("the consumer's prefetch is %d after a Fetch of %d, want 3×%d", prefetch, slots, slots)
	}
	waitBuffered(t, b, q, 2*slots, fmt.Sprintf("with %d deliveries unacked (settling) and a window of 3×%d slots", slots, slots))
	if st, err := b.Stats(ctx, q); err != nil || st.Pending != slots {
		t.Fatalf("window bound broken: with a window of 3×%d slots RabbitMQ should have sent %d of %d messages, leaving %d ready; Stats: %+v, %v", slots, 3*slots, 4*slots, slots, st, err)
	}
	// The next Fetch takes buffered messages at once.
	next := fetchN(t, ctx, b, q, slots)
	if err := errors.Join(b.Ack(ctx, append(settling, next...))...); err != nil {
		t.Fatal(err)
	}
}

// TestPrefetchWindowGrows: with PrefetchMultiplier 1 (URL
// prefetch_multiplier=1) the window starts at the worker's slots. A worker
// fetches again while the deliveries it fetched before still settle
// (unacked): the Fetch gets its messages (a caller is never starved by
// what it holds), and the consumer is restarted once, with a window of
// what it then held and asked for, not once per Fetch (each restart is
// three round trips on the channel the acks wait for).
func TestPrefetchWindowGrows(t *testing.T) {
	const slots, rounds = 4, 5
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := errand.OpenBroker(ctx, amqpURL(t)+"?prefetch_multiplier=x"); err == nil || !strings.Contains(err.Error(), "prefetch_multiplier") {
		t.Fatalf("prefetch_multiplier=x: want an error naming the parameter, got %v", err)
	}
	opened, err := errand.OpenBroker(ctx, amqpURL(t)+"?prefix=errand-test-window.&prefetch_multiplier=1")
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	b := opened.(*amqpbroker.Broker)
	q := fmt.Sprintf("window1-%d", time.Now().UnixNano())
	publishN(t, ctx, b, q, (rounds+1)*slots)

	settling := fetchN(t, ctx, b, q, slots)
	first, prefetch := amqpbroker.Consumer(b, q)
	if prefetch != slots {
		t.Fatalf("with prefetch_multiplier=1 the consumer's prefetch is %d after a Fetch of %d, want %d", prefetch, slots, slots)
	}
	tags := []string{first}
	for range rounds {
		next := fetchN(t, ctx, b, q, slots) // while the last ones settle
		if err := errors.Join(b.Ack(ctx, settling)...); err != nil {
			t.Fatal(err)
		}
		settling = next
		tag, _ := amqpbroker.Consumer(b, q)
		if tags[len(tags)-1] != tag {
			tags = append(tags, tag)
		}
	}
	if err := errors.Join(b.Ack(ctx, settling)...); err != nil {
		t.Fatal(err)
	}
	if len(tags) != 2 {
		t.Fatalf("consumer restarted %d times in %d rounds of a Fetch while the last Fetch's deliveries settle (consumers %v); want one restart, to a window of what the worker holds and asks for", len(tags)-1, rounds, tags)
	}
	if _, prefetch := amqpbroker.Consumer(b, q); prefetch != 2*slots {
		t.Fatalf("after Fetch calls of %d while %d settle, the consumer's prefetch is %d, want %d", slots, slots, prefetch, 2*slots)
	}
}

// TestCloseGivesBackBuffered: Close gives back what the consumer holds
// buffered (pushed, never handed out) as copies, so those messages, which
// never ran, do not count a delivery: each is first fetched afterwards
// with Attempt 1 (closing the channel would count one: x-delivery-count on
// a quorum queue, the redelivered flag on a classic one).
func TestCloseGivesBackBuffered(t *testing.T) {
	for _, classic := range []bool{false, true} {
		t.Run(fmt.Sprint("classic=", classic), func(t *testing.T) {
			const n = 6
			opts := amqpbroker.Options{QueuePrefix: "errand-test-closeback.", Classic: classic, Prefetch: n, Logger: testLogger()}
			b := amqpbroker.New(amqpURL(t), &opts)
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			q := fmt.Sprintf("closeback-%d", time.Now().UnixNano())
			publishN(t, ctx, b, q, n)
			first := fetchN(t, ctx, b, q, 1)
			waitBuffered(t, b, q, n-1, fmt.Sprintf("with a prefetch of %d and one fetched", n))
			if err := errors.Join(b.Ack(ctx, first)...); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			b2 := amqpbroker.New(amqpURL(t), &opts)
			defer b2.Close()
			got := map[string]int{}
			back := fetchN(t, ctx, b2, q, n-1)
			for _, d := range back {
				if _, dup := got[d.ID]; dup || d.ID == first[0].ID {
					t.Errorf("%s came back twice, or after its ack", d.ID)
				}
				got[d.ID] = d.Attempt
			}
			if err := errors.Join(b2.Ack(ctx, back)...); err != nil {
				t.Fatal(err)
			}
			for id, a := range got {
				if a != 1 {
					t.Errorf("%s, buffered when its broker closed, came back with Attempt %d, want 1: a message that never ran counted a delivery (all: %v)", id, a, got)
				}
			}
			if len(got) != n-1 {
				t.Errorf("at-least-once promise broken: %d of the %d buffered messages came back: %v", len(got), n-1, got)
			}
		})
	}
}

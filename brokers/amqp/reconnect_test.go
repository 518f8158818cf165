package amqpbroker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/driver"
)

// cutter forwards TCP connections to target and can cut every open one
// (a network failure, a node's connection killed) while it keeps accepting
// new ones.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutter(t *testing.T, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			c.wg.Add(2)
			go func() { defer c.wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer c.wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); c.cut(); c.wg.Wait() })
	return c
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestConnectionLoss: the broker's connections are cut while it holds
// deliveries. Settling those answers ErrLeaseLost (RabbitMQ has them back),
// and the broker reconnects on its own: every message is delivered again,
// and publishing works, with no call made to reconnect.
func TestConnectionLoss(t *testing.T) {
	u, err := url.Parse(amqpURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := newCutter(t, u.Host)
	u.Host = c.ln.Addr().String()
	b := amqpbroker.New(u.String(), &amqpbroker.Options{QueuePrefix: "errand-test.", CallTimeout: 5 * time.Second})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := fmt.Sprintf("loss-%d", time.Now().UnixNano())
	const n = 6
	for i := range n {
		if err := b.Publish(ctx, errand.Message{ID: fmt.Sprint("m", i), Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	held := fetchN(t, ctx, b, q, 3)
	c.cut()
	// The broker notices the cut (its reader fails) at once.
	deadline, pause := time.Now().Add(10*time.Second), 5*time.Millisecond
	for {
		err := errors.Join(b.Ack(ctx, held[:1])...)
		if errors.Is(err, driver.ErrLeaseLost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("at-least-once promise broken: an ack after the connection was cut answered %v; want ErrLeaseLost (RabbitMQ requeued the message)", err)
		}
		time.Sleep(pause) // poll interval, not a wait for the event
		pause = min(2*pause, 200*time.Millisecond)
	}
	if err := b.Publish(ctx, errand.Message{ID: "after", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatalf("Publish after a lost connection did not reconnect: %v", err)
	}
	got := map[string]bool{}
	for _, d := range fetchN(t, ctx, b, q, n+1) {
		got[d.ID] = true
		if err := errors.Join(b.Ack(ctx, []*driver.Delivery{d})...); err != nil {
			t.Fatalf("Ack after reconnecting: %v", err)
		}
	}
	if len(got) != n+1 {
		t.Fatalf("at-least-once promise broken: after the cut %d distinct messages came back, want %d: %v", len(got), n+1, got)
	}
}

// TestChannelLoss: the queue a consumer reads is deleted under it (RabbitMQ
// cancels the consumer and the broker's declaration is stale). The next
// publish declares the queue again and the next fetch consumes again.
func TestChannelLoss(t *testing.T) {
	u := amqpURL(t)
	b := amqpbroker.New(u, &amqpbroker.Options{QueuePrefix: "errand-test.", CallTimeout: 5 * time.Second, Logger: testLogger()})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := fmt.Sprintf("chanloss-%d", time.Now().UnixNano())
	if err := b.Publish(ctx, errand.Message{ID: "one", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d := fetchN(t, ctx, b, q, 1)
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("errand-test."+q, false, false, false); err != nil {
		t.Fatal(err)
	}
	// The message went with its queue: RabbitMQ forgets the channel's
	// unacked deliveries of a deleted queue and ignores their acks, so the
	// ack is no error (and the channel stays open for the next consumer).
	if err := errors.Join(b.Ack(ctx, d)...); err != nil {
		t.Fatalf("ack of a delivery of a deleted queue: %v, want nil (RabbitMQ ignores it)", err)
	}
	if err := b.Publish(ctx, errand.Message{ID: "two", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatalf("Publish to a deleted queue did not declare it again: %v", err)
	}
	if got := fetchN(t, ctx, b, q, 1); got[0].ID != "two" {
		t.Fatalf("fetched %s after the queue came back, want two", got[0].ID)
	}
}

func fetchN(t *testing.T, ctx context.Context, b *amqpbroker.Broker, q string, n int) []*driver.Delivery {
	t.Helper()
	var out []*driver.Delivery
	for len(out) < n {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		ds, err := b.Fetch(fctx, q, n-len(out), time.Minute)
		cancel()
		if err != nil {
			t.Fatalf("Fetch (%d of %d so far): %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

func testLogger() *slog.Logger {
	if os.Getenv("ERRAND_AMQP_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

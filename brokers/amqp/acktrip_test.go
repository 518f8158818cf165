package amqpbroker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// frameCounter is a net.Conn that counts the AMQP method frames the client
// writes, by class and method.
type frameCounter struct {
	net.Conn
	mu     sync.Mutex
	buf    []byte
	header bool // the protocol header was skipped
	counts map[[2]uint16]int
}

func (c *frameCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf = append(c.buf, p...)
	if !c.header && len(c.buf) >= 8 {
		c.buf, c.header = c.buf[8:], true // "AMQP" 0 0 9 1
	}
	for c.header && len(c.buf) >= 7 {
		size := int(binary.BigEndian.Uint32(c.buf[3:7]))
		if len(c.buf) < 7+size+1 {
			break
		}
		if c.buf[0] == 1 && size >= 4 { // a method frame: class, method
			c.counts[[2]uint16{binary.BigEndian.Uint16(c.buf[7:9]), binary.BigEndian.Uint16(c.buf[9:11])}]++
		}
		c.buf = c.buf[7+size+1:]
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *frameCounter) count(class, method uint16) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[[2]uint16{class, method}]
}

var (
	basicAck        = [2]uint16{60, 80}
	exchangeDeclare = [2]uint16{40, 10} // the round trip after acks (a passive declare)
)

// TestAckRoundTripsShared: concurrent Ack calls on one channel share the
// round trip that confirms their acks. RabbitMQ stalls while eight calls,
// one delivery each, have sent their acks; once it answers, every call
// returns without error after at most two round trips (the one under way,
// and one for the acks sent after it began), not after one round trip per
// call made one after the other.
func TestAckRoundTripsShared(t *testing.T) {
	u, err := url.Parse(amqpURL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := conformance.NewProxy(t, u.Host)
	u.Host = px.Addr()
	var mu sync.Mutex
	var counters []*frameCounter
	dial := func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		fc := &frameCounter{Conn: c, counts: map[[2]uint16]int{}}
		mu.Lock()
		counters = append(counters, fc)
		mu.Unlock()
		return fc, nil
	}
	b := amqpbroker.New(u.String(), &amqpbroker.Options{QueuePrefix: "errand-test-acktrip.", Heartbeat: time.Minute, Dial: dial, Logger: testLogger()})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := fmt.Sprintf("acktrip-%d", time.Now().UnixNano())
	const n = 8
	publishN(t, ctx, b, q, n)
	ds := fetchN(t, ctx, b, q, n)
	frames := func(f [2]uint16) int {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, c := range counters {
			total += c.count(f[0], f[1])
		}
		return total
	}
	declares := frames(exchangeDeclare)

	px.Stall()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Go(func() { errs[i] = errors.Join(b.Ack(ctx, []*driver.Delivery{d})...) })
	}
	deadline := time.Now().Add(20 * time.Second)
	for frames(basicAck) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acks sent", frames(basicAck), n)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for the event
	}
	px.Resume()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Ack calls: %v", err)
	}
	if trips := frames(exchangeDeclare) - declares; trips > 2 {
		t.Fatalf("%d concurrent Ack calls on one channel made %d round trips, one after the other; want at most 2 (the one under way when they acked, and one for the acks sent after it began)", n, trips)
	}
	// The acks took: closing the broker gives nothing back.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := amqpbroker.New(amqpURL(t), &amqpbroker.Options{QueuePrefix: "errand-test-acktrip.", Logger: testLogger()})
	defer b2.Close()
	if st, err := b2.Stats(ctx, q); err != nil || st.Pending != 0 {
		t.Fatalf("after %d confirmed acks and a Close the queue holds %+v (%v); want it empty", n, st, err)
	}
}

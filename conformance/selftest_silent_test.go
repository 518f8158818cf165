package conformance

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// wire stands for a driver's connection to its server: before each call,
// one round trip through addr (a Proxy in front of an echo server). A
// healthy wire gives up by the ctx deadline or its own timeout, whichever
// comes first; a broken one ignores its ctx, as a client without ctx
// support whose socket timeout is longer than the caller allows.
type wire struct {
	addr    string
	timeout time.Duration
	broken  bool
}

func (w wire) trip(ctx context.Context) error {
	limit := time.Now().Add(w.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(limit) && !w.broken {
		limit = dl
	}
	c, err := net.DialTimeout("tcp", w.addr, time.Until(limit))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(limit)
	if _, err := c.Write([]byte{1}); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

type wiredBroker struct {
	*memorybroker.Broker
	w wire
}

func (b *wiredBroker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if err := b.w.trip(ctx); err != nil {
		return err
	}
	return b.Broker.Publish(ctx, msgs...)
}

func (b *wiredBroker) Fetch(ctx context.Context, q string, n int, lease time.Duration) ([]*driver.Delivery, error) {
	if err := b.w.trip(ctx); err != nil {
		return nil, err
	}
	return b.Broker.Fetch(ctx, q, n, lease)
}

func (b *wiredBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if err := b.w.trip(ctx); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return b.Broker.Ack(ctx, ds)
}

func (b *wiredBroker) Release(ctx context.Context, d *driver.Delivery, nb time.Time) error {
	if err := b.w.trip(ctx); err != nil {
		return err
	}
	return b.Broker.Release(ctx, d, nb)
}

func (b *wiredBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if err := b.w.trip(ctx); err != nil {
		return err
	}
	return b.Broker.Extend(ctx, d, lease)
}

func (b *wiredBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if err := b.w.trip(ctx); err != nil {
		return err
	}
	return b.Broker.Reject(ctx, d, reason)
}

type wiredBackend struct {
	*memorybackend.Backend
	w wire
}

func (b *wiredBackend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	if err := b.w.trip(ctx); err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	return b.Backend.SetStates(ctx, sts)
}

func (b *wiredBackend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	if err := b.w.trip(ctx); err != nil {
		return nil, err
	}
	return b.Backend.GetState(ctx, id)
}

func (b *wiredBackend) InitGroup(ctx context.Context, g string, ids []string) error {
	if err := b.w.trip(ctx); err != nil {
		return err
	}
	return b.Backend.InitGroup(ctx, g, ids)
}

func (b *wiredBackend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	if err := b.w.trip(ctx); err != nil {
		return 0, 0, err
	}
	return b.Backend.CompleteGroupMember(ctx, g, id)
}

func (b *wiredBackend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	if err := b.w.trip(ctx); err != nil {
		return false, err
	}
	return b.Backend.ClaimChord(ctx, g, claimer)
}

func (b *wiredBackend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	if err := b.w.trip(ctx); err != nil {
		return nil, err
	}
	return b.Backend.GroupStates(ctx, g)
}

// echoServer answers every byte with itself until t ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// TestKitCatchesCallsUnboundedOnSilentServer: RunSilentServer fails on
// drivers whose calls ignore their ctx deadline (a client whose own
// timeout is longer than the caller allows), and passes on drivers that
// give up by the deadline or their per-call timeout.
func TestKitCatchesCallsUnboundedOnSilentServer(t *testing.T) {
	t.Parallel()
	target := echoServer(t)
	const callTimeout = time.Second
	harness := func(broken bool, broker bool) SilentHarness {
		w := func(addr string) wire { return wire{addr: addr, timeout: callTimeout, broken: broken} }
		h := SilentHarness{Target: target, CallTimeout: callTimeout, Deadline: 300 * time.Millisecond, Slack: 300 * time.Millisecond}
		if broker {
			h.Broker = func(t testing.TB, addr string) errand.Broker {
				b := memorybroker.New(nil)
				t.Cleanup(func() { b.Close() })
				return &wiredBroker{Broker: b, w: w(addr)}
			}
		} else {
			h.Backend = func(t testing.TB, addr string) errand.Backend {
				b := memorybackend.New(nil)
				t.Cleanup(func() { b.Close() })
				return &wiredBackend{Backend: b, w: w(addr)}
			}
		}
		return h.withDefaults()
	}
	for _, kind := range []struct {
		name   string
		broker bool
	}{{"Broker", true}, {"Backend", false}} {
		if m := runMock(t, func(mt testing.TB) { silentCalls(mt, harness(false, kind.broker)) }); m.Failed() {
			t.Errorf("SilentServer fails on a %s that gives up by its ctx deadline or per-call timeout: %v", kind.name, m.msgs)
		}
		m := runMock(t, func(mt testing.TB) { silentCalls(mt, harness(true, kind.broker)) })
		if !m.Failed() {
			t.Errorf("SilentServer passed on a %s whose calls ignore their ctx deadline; the case cannot fail", kind.name)
		} else if !strings.Contains(strings.Join(m.msgs, "\n"), "with a ctx deadline of") {
			t.Errorf("SilentServer failed on a %s whose calls ignore their ctx deadline, but not for that: %v", kind.name, m.msgs)
		}
	}
}

// TestKitCatchesShutdownHeldByHangingAck: the acking scenario of
// RunShutdownSilentServer fails on a broker whose acks ignore their ctx (as
// a driver stuck on a silent server would), and passes on the healthy
// memory broker.
func TestKitCatchesShutdownHeldByHangingAck(t *testing.T) {
	t.Parallel()
	tm := Timing{Lease: 300 * time.Millisecond, Watchdog: 30 * time.Second}.withDefaults()
	target := echoServer(t)
	harness := func(stuck bool) SilentServerHarness {
		shared := memorybroker.New(nil) // both workers' brokers: one queue store
		t.Cleanup(func() { shared.Close() })
		return SilentServerHarness{Target: target, Timing: tm, Broker: func(t testing.TB, _ string) errand.Broker {
			b := &brokenBroker{Broker: shared}
			if stuck {
				b.ack = func(b *brokenBroker, _ context.Context, d *driver.Delivery) error {
					time.Sleep(ShutdownDeadline + 2*ShutdownSlack) // a call that ignores its ctx
					return ack1(b.Broker, context.Background(), d)
				}
			}
			return b
		}}
	}
	if m := runMock(t, func(mt testing.TB) { shutdownSilentAcking(mt, harness(false), tm) }); m.Failed() {
		t.Fatalf("Shutdown/SilentServerWhileAcking fails on the healthy memory broker: %v", m.msgs)
	}
	if m := runMock(t, func(mt testing.TB) { shutdownSilentAcking(mt, harness(true), tm) }); !m.Failed() {
		t.Fatalf("Shutdown/SilentServerWhileAcking passed on a broker whose Ack ignores its ctx; the case cannot fail")
	}
}

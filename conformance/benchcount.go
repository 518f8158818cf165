package conformance

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// countingBroker counts the calls errand makes to a broker driver (every
// method but Close and Limits, which make no round trip). Ack counts one
// call however many deliveries it carries.
type countingBroker struct {
	drv   errand.Broker
	calls *atomic.Int64
}

func (c *countingBroker) Publish(ctx context.Context, msgs ...driver.Message) error {
	c.calls.Add(1)
	return c.drv.Publish(ctx, msgs...)
}

func (c *countingBroker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	c.calls.Add(1)
	return c.drv.Fetch(ctx, queue, limit, lease)
}

func (c *countingBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	c.calls.Add(1)
	return c.drv.Ack(ctx, ds)
}

func (c *countingBroker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	c.calls.Add(1)
	return c.drv.Release(ctx, d, notBefore)
}

func (c *countingBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	c.calls.Add(1)
	return c.drv.Extend(ctx, d, lease)
}

func (c *countingBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	c.calls.Add(1)
	return c.drv.Reject(ctx, d, reason)
}

func (c *countingBroker) Close() error { return c.drv.Close() }

// Limits passes the driver's limits on (zero, no limit, when it declares
// none: what errand assumes of a broker that is no driver.Limiter).
func (c *countingBroker) Limits() driver.Limits {
	if l, ok := c.drv.(driver.Limiter); ok {
		return l.Limits()
	}
	return driver.Limits{}
}

// countBroker wraps br to count its calls into calls. It keeps the optional
// capability that decides errand's per-task path (driver.Limiter's limits,
// among them the largest ack batch); it hides the periodic ones (driver.Pauser's
// pause polls, driver.Heartbeater's heartbeats), which cost the same
// whatever the number of tasks, and those a no-op task never uses.
func countBroker(br errand.Broker, calls *atomic.Int64) errand.Broker {
	return &countingBroker{drv: br, calls: calls}
}

// countingBackend counts the calls errand makes to a backend driver (every
// method but Close). SetStates counts one call however many states it
// carries.
type countingBackend struct {
	drv   errand.Backend
	calls *atomic.Int64
}

func (c *countingBackend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	c.calls.Add(1)
	return c.drv.SetStates(ctx, sts)
}

func (c *countingBackend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	c.calls.Add(1)
	return c.drv.GetState(ctx, id)
}

func (c *countingBackend) InitGroup(ctx context.Context, g string, ids []string) error {
	c.calls.Add(1)
	return c.drv.InitGroup(ctx, g, ids)
}

func (c *countingBackend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	c.calls.Add(1)
	return c.drv.CompleteGroupMember(ctx, g, id)
}

func (c *countingBackend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	c.calls.Add(1)
	return c.drv.ClaimChord(ctx, g, claimer)
}

func (c *countingBackend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	c.calls.Add(1)
	return c.drv.GroupStates(ctx, g)
}

func (c *countingBackend) Close() error { return c.drv.Close() }

type countStarter struct{ c *countingBackend }

func (s countStarter) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	s.c.calls.Add(1)
	return s.c.drv.(driver.Starter).Start(ctx, reqs)
}

type countPending struct{ c *countingBackend }

func (p countPending) SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error {
	p.c.calls.Add(1)
	return p.c.drv.(driver.PendingWriter).SetPendingIfAbsent(ctx, sts)
}

// countBackend wraps be to count its calls into calls. It keeps the
// optional capabilities that decide errand's per-task path (driver.Starter,
// driver.PendingWriter); it hides driver.StateWaiter and driver.Expirer, which
// a drain without result waits never uses.
func countBackend(be errand.Backend, calls *atomic.Int64) errand.Backend {
	c := &countingBackend{drv: be, calls: calls}
	_, s := be.(driver.Starter)
	_, p := be.(driver.PendingWriter)
	switch {
	case s && p:
		return struct {
			*countingBackend
			countStarter
			countPending
		}{c, countStarter{c}, countPending{c}}
	case s:
		return struct {
			*countingBackend
			countStarter
		}{c, countStarter{c}}
	case p:
		return struct {
			*countingBackend
			countPending
		}{c, countPending{c}}
	}
	return c
}

package conformance

// The memory drivers' co-location (driver.Colocator), broken in parts,
// for the self-test of the Worker/Colocation cases: each variant replaces
// one of the memory broker's co-located calls.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// memCarrier is errand's memory broker with its co-location (the memory
// broker's own driver.Colocator) replaced in part: publish, start and
// settle, when set, replace Send, the starts of FetchStart and Settle
// (nil: the driver's own). own, when set, is where it writes the states of
// a backend it cannot co-locate with (a broker that answers for any
// backend).
type memCarrier struct {
	*memorybroker.Broker
	publish func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error)
	settle  func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error
	start   func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult
	own     *memorybackend.Backend
}

var _ driver.Colocator = (*memCarrier)(nil)

func (c *memCarrier) Colocate(be driver.Backend) driver.Colocation {
	real := c.Broker.Colocate(be)
	mb, _ := be.(*memorybackend.Backend)
	if real == nil || mb == nil {
		if c.own == nil {
			return nil
		}
		mb, real = c.own, c.Broker.Colocate(c.own)
	}
	return &memColocation{c: c, be: mb, real: real}
}

// memColocation is memCarrier's driver.Colocation for the backend be.
type memColocation struct {
	c    *memCarrier
	be   *memorybackend.Backend
	real driver.Colocation
}

func (m *memColocation) Send(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
	if m.c.publish != nil {
		return m.c.publish(m.c, m.be, ctx, sts, msgs)
	}
	return m.real.Send(ctx, sts, msgs)
}

func (m *memColocation) FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	if m.c.start == nil {
		return m.real.FetchStart(ctx, queue, limit, lease, tasks)
	}
	ds, err := m.c.Broker.Fetch(ctx, queue, limit, lease)
	if err != nil || len(ds) == 0 {
		return ds, nil, time.Time{}, err
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	return ds, m.c.start(m.be, context.WithoutCancel(ctx), ds, tasks, at), at, nil
}

func (m *memColocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
	if m.c.settle != nil {
		return m.c.settle(m.c, m.be, ctx, ds, sts)
	}
	return m.real.Settle(ctx, ds, sts)
}

// startCorrectly is FetchStart's start as driver.Colocation describes it: the backend's Start of each delivery whose task is in
// tasks (the memory broker and backend are one process: the fetch and
// the starts are one step for the worker).
func startCorrectly(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult {
	out := make([]*driver.StartResult, len(ds))
	for i, d := range ds {
		if d.Task == "" || !slices.Contains(tasks, d.Task) {
			continue
		}
		out[i] = startOne(be, ctx, d, at)
	}
	return out
}

// startOne begins d's attempt with the backend's Start.
func startOne(be *memorybackend.Backend, ctx context.Context, d *driver.Delivery, at time.Time) *driver.StartResult {
	rcv := &errand.TaskState{TaskUUID: d.ID, TaskName: d.Task, State: errand.StateReceived, Attempt: d.TaskAttempt, CreatedAt: at}
	st := rcv.Copy()
	st.State, st.StartedAt = errand.StateStarted, at
	res := be.Start(ctx, []driver.StartRequest{{Received: rcv, Started: st, FirstDelivery: d.Attempt == 1}})[0]
	return &res
}

// carrierPair returns the memory broker and backend harnesses, the
// broker's co-located calls replaced by mod.
func carrierPair(mod func(c *memCarrier)) workerPair {
	bh := healthyBroker()
	bh.New = func(t testing.TB) errand.Broker {
		c := &memCarrier{Broker: memorybroker.New(nil)}
		if mod != nil {
			mod(c)
		}
		t.Cleanup(func() {
			c.Broker.Close()
			if c.own != nil {
				c.own.Close()
			}
		})
		return c
	}
	return workerPair{bh, healthyBackend()}
}

// brokenPairs are broken co-located brokers with the backend harness of their
// server; the worker targets name them "pair:NAME".
var brokenPairs = map[string]workerPair{
	// Publishes and drops the states: the task is not PENDING after
	// SendTask.
	"colocation-drops-states": carrierPair(func(c *memCarrier) {
		c.publish = func(c *memCarrier, _ *memorybackend.Backend, ctx context.Context, _ []*errand.TaskState, msgs []errand.Message) (bool, error) {
			return true, c.Broker.Publish(ctx, msgs...)
		}
	}),
	// Writes the states and publishes nothing, reporting success.
	"colocation-publishes-nothing": carrierPair(func(c *memCarrier) {
		c.publish = func(_ *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, _ []errand.Message) (bool, error) {
			return true, errors.Join(be.SetPendingIfAbsent(ctx, sts)...)
		}
	}),
	// A plain SET instead of SET NX: PENDING overwrites what a worker
	// recorded.
	"colocation-overwrites-states": carrierPair(func(c *memCarrier) {
		c.publish = func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
			if err := errors.Join(be.SetStates(ctx, sts)...); err != nil {
				return false, err
			}
			return true, c.Broker.Publish(ctx, msgs...)
		}
	}),
	// Writes the states, fails to publish (its ctx is done) and reports
	// published=true, the publish's error passed off as the states'.
	"colocation-published-despite-failure": carrierPair(func(c *memCarrier) {
		c.publish = func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
			if err := errors.Join(be.SetPendingIfAbsent(context.WithoutCancel(ctx), sts)...); err != nil {
				return false, err
			}
			if err := ctx.Err(); err != nil {
				return true, err // nothing published
			}
			return true, c.Broker.Publish(ctx, msgs...)
		}
	}),
	// Carries any backend: the states of one it does not share a server
	// with go to its own store, where that backend never reads them.
	"colocation-carries-unknown-backend": carrierPair(func(c *memCarrier) {
		c.own = memorybackend.New(nil)
	}),
	// Starts every task it fetches, whatever spec.Tasks says.
	"colocation-start-starts-any-task": carrierPair(func(c *memCarrier) {
		c.start = func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, _ []string, at time.Time) []*driver.StartResult {
			out := make([]*driver.StartResult, len(ds))
			for i, d := range ds {
				if d.Task != "" {
					out[i] = startOne(be, ctx, d, at)
				}
			}
			return out
		}
	}),
	// Writes STARTED over any state (no table), answering written.
	"colocation-start-ignores-table": carrierPair(func(c *memCarrier) {
		c.start = func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult {
			out := make([]*driver.StartResult, len(ds))
			for i, d := range ds {
				if !slices.Contains(tasks, d.Task) {
					continue
				}
				prev, _ := be.GetState(ctx, d.ID)
				st := &errand.TaskState{TaskUUID: d.ID, TaskName: d.Task, State: errand.StateStarted, Attempt: d.TaskAttempt, CreatedAt: at, StartedAt: at}
				be.SetStates(ctx, []*errand.TaskState{st})
				out[i] = &driver.StartResult{Prev: prev, Written: true}
			}
			return out
		}
	}),
	// Follows the table but takes SUCCESS alone for final: starts a task
	// over its FAILURE.
	"colocation-start-restarts-failure": carrierPair(func(c *memCarrier) {
		c.start = func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult {
			out := make([]*driver.StartResult, len(ds))
			for i, d := range ds {
				if !slices.Contains(tasks, d.Task) {
					continue
				}
				if prev, err := be.GetState(ctx, d.ID); err == nil && prev.State == errand.StateFailure {
					st := &errand.TaskState{TaskUUID: d.ID, TaskName: d.Task, State: errand.StateStarted, Attempt: d.TaskAttempt, CreatedAt: prev.CreatedAt, StartedAt: at}
					be.SetStates(ctx, []*errand.TaskState{st})
					out[i] = &driver.StartResult{Prev: prev, Written: true}
					continue
				}
				out[i] = startOne(be, ctx, d, at)
			}
			return out
		}
	}),
	// Starts by the table, but a task created after the fetch's time (a
	// producer's clock ahead) is left STARTED at the fetch's time, before
	// its CreatedAt.
	"colocation-start-starts-before-created": carrierPair(func(c *memCarrier) {
		c.start = func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult {
			out := startCorrectly(be, ctx, ds, tasks, at)
			for i, r := range out {
				if r == nil || !r.Written || r.Prev == nil {
					continue
				}
				if st, err := be.GetState(ctx, ds[i].ID); err == nil {
					st.StartedAt = at
					be.SetStates(ctx, []*errand.TaskState{st})
				}
			}
			return out
		}
	}),
	// Answers each start as written and writes nothing.
	"colocation-start-writes-nothing": carrierPair(func(c *memCarrier) {
		c.start = func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, _ time.Time) []*driver.StartResult {
			out := make([]*driver.StartResult, len(ds))
			for i, d := range ds {
				if slices.Contains(tasks, d.Task) {
					prev, _ := be.GetState(ctx, d.ID)
					out[i] = &driver.StartResult{Prev: prev, Written: true}
				}
			}
			return out
		}
	}),
	// Acks and drops the states: the task is not SUCCESS after its settle.
	"colocation-settle-drops-states": carrierPair(func(c *memCarrier) {
		c.settle = func(c *memCarrier, _ *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, _ []*errand.TaskState) []error {
			return c.Broker.Ack(ctx, ds)
		}
	}),
	// Writes the states and acks nothing, reporting success: the messages
	// come back after their lease.
	"colocation-settle-acks-nothing": carrierPair(func(c *memCarrier) {
		c.settle = func(_ *memCarrier, be *memorybackend.Backend, ctx context.Context, _ []*driver.Delivery, sts []*errand.TaskState) []error {
			return be.SetStates(ctx, sts)
		}
	}),
	// Acks first and writes a state only where its ack succeeded: a lost
	// lease leaves the state unwritten.
	"colocation-settle-skips-lost-states": carrierPair(func(c *memCarrier) {
		c.settle = func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
			out := make([]error, len(ds))
			for i, d := range ds {
				if out[i] = errors.Join(c.Broker.Ack(ctx, []*driver.Delivery{d})...); out[i] == nil {
					out[i] = errors.Join(be.SetStates(ctx, sts[i:i+1])...)
				}
			}
			return out
		}
	}),
}

func init() {
	workerTargets["Colocation/Send"] = "pair:colocation-drops-states"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Colocation/Send", "pair:colocation-publishes-nothing"},
		target{"Colocation/Send", "pair:colocation-overwrites-states"},
		target{"Colocation/Send", "pair:colocation-published-despite-failure"},
		target{"Colocation/Send", "pair:colocation-carries-unknown-backend"},
	)
	workerTargets["Colocation/Settle"] = "pair:colocation-settle-drops-states"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Colocation/Settle", "pair:colocation-settle-acks-nothing"},
		target{"Colocation/Settle", "pair:colocation-settle-skips-lost-states"},
		target{"Colocation/Settle", "pair:colocation-carries-unknown-backend"},
	)
	workerTargets["Colocation/Start"] = "pair:colocation-start-ignores-table"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Colocation/Start", "pair:colocation-start-starts-any-task"},
		target{"Colocation/Start", "pair:colocation-start-writes-nothing"},
		target{"Colocation/Start", "pair:colocation-start-restarts-failure"},
		target{"Colocation/Start", "pair:colocation-start-starts-before-created"},
		target{"Colocation/Start", "pair:colocation-carries-unknown-backend"},
	)
	// A co-locating broker its harness does not declare.
	brokenBrokers["undeclared-colocator"] = func() BrokerHarness {
		h := carrierPair(nil).broker
		h.Caps.Colocate = false
		return h
	}()
	extraBrokerTargets = append(extraBrokerTargets, target{"Capabilities", "undeclared-colocator"})
}

// TestColocationRefusesStrangers: the memory broker co-locates with the
// memory backend and with no other (a backend of no location, or of a
// location it does not know); the cases' "not co-located" path logs and
// checks nothing.
func TestColocationRefusesStrangers(t *testing.T) {
	t.Parallel()
	p := carrierPair(nil)
	br := p.broker.New(t).(driver.Colocator)
	if br.Colocate(p.backend.New(t, 0)) == nil {
		t.Fatalf("the memory broker does not co-locate with the memory backend")
	}
	stranger := newStrangerStore()
	defer stranger.Close()
	for _, be := range []driver.Backend{stranger, strangerBackend{stranger}} {
		if br.Colocate(be) != nil {
			t.Fatalf("the memory broker co-locates with %T", be)
		}
	}
	far := p.backend
	far.New = func(t testing.TB, _ time.Duration) errand.Backend { return newStrangerStore() }
	m := runMock(t, func(mt testing.TB) { carriedPending(mt, workerPair{p.broker, far}) })
	if m.Failed() {
		t.Fatalf("Colocation/Send fails on a pair that is not co-located (it must log and check nothing): %v", m.msgs)
	}
}

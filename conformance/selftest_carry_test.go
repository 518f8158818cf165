package conformance

// A memory broker that carries the PENDING writes of memory backends
// (driver.PendingCarrier), correct and broken, for the self-test of
// Worker/Send/CarriedPending. The memory drivers themselves carry nothing
// (a driver never imports another); the pair lives here.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// carrierServer stands for the server a broker and a backend share: the
// memory backends made by one pair's backend harness.
type carrierServer struct {
	mu       sync.Mutex
	backends map[*memorybackend.Backend]bool
}

func (s *carrierServer) add(be *memorybackend.Backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends[be] = true
}

func (s *carrierServer) has(be *memorybackend.Backend) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backends[be]
}

// memCarrier is the memory broker carrying the PENDING writes of the memory
// backends on its server: a call writes the states where absent, then
// publishes, as errand's Redis broker does on one Redis node. publish
// replaces the call (nil: the correct one); own, when set, is where it
// writes the states of a backend that is not on its server (a carrier that
// answers for any backend).
type memCarrier struct {
	*memorybroker.Broker
	server  *carrierServer
	publish func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error)
	settle  func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error
	start   func(be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, tasks []string, at time.Time) []*driver.StartResult
	own     *memorybackend.Backend
}

var _ driver.StartCarrier = (*memCarrier)(nil)

func (c *memCarrier) CarryStart(be driver.Backend) driver.FetchStartFunc {
	mb, ok := be.(*memorybackend.Backend)
	if !ok || !c.server.has(mb) {
		if c.own == nil {
			return nil
		}
		mb = c.own
	}
	return func(ctx context.Context, queue string, limit int, lease time.Duration, spec driver.StartSpec) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
		ds, err := c.Broker.Fetch(ctx, queue, limit, lease)
		if err != nil || len(ds) == 0 {
			return ds, nil, time.Time{}, err
		}
		at := time.Now().UTC()
		start := startCorrectly
		if c.start != nil {
			start = c.start
		}
		return ds, start(mb, context.WithoutCancel(ctx), ds, spec.Tasks, at), at, nil
	}
}

// startCorrectly is the carried fetch's start as driver.FetchStartFunc
// describes it: the backend's Start of each delivery whose task is in
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

var (
	_ driver.PendingCarrier = (*memCarrier)(nil)
	_ driver.SettleCarrier  = (*memCarrier)(nil)
)

func (c *memCarrier) CarrySettle(be driver.Backend) driver.SettleFunc {
	mb, ok := be.(*memorybackend.Backend)
	if !ok || !c.server.has(mb) {
		if c.own == nil {
			return nil
		}
		mb = c.own
	}
	return func(ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
		if c.settle != nil {
			return c.settle(c, mb, ctx, ds, sts)
		}
		return settleCorrectly(c, mb, ctx, ds, sts)
	}
}

// settleCorrectly is the carried settle as driver.SettleFunc describes
// it: the states, then the acks of the deliveries whose state was written.
func settleCorrectly(c *memCarrier, be *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
	if err := ctx.Err(); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	out := make([]error, len(ds))
	serrs := be.SetStates(ctx, sts)
	var ack []*driver.Delivery
	var idx []int
	for i, d := range ds {
		if serrs != nil && serrs[i] != nil {
			out[i] = serrs[i]
			continue
		}
		ack, idx = append(ack, d), append(idx, i)
	}
	if aerrs := c.Broker.Ack(ctx, ack); aerrs != nil {
		for j, i := range idx {
			out[i] = aerrs[j]
		}
	}
	return out
}

func (c *memCarrier) CarryPending(be driver.Backend) driver.PublishPendingFunc {
	mb, ok := be.(*memorybackend.Backend)
	if !ok || !c.server.has(mb) {
		if c.own == nil {
			return nil
		}
		mb = c.own
	}
	return func(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
		if c.publish != nil {
			return c.publish(c, mb, ctx, sts, msgs)
		}
		return carryCorrectly(c, mb, ctx, sts, msgs)
	}
}

// carryCorrectly is the carried call as driver.PublishPendingFunc
// describes it.
func carryCorrectly(c *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := errors.Join(be.SetPendingIfAbsent(ctx, sts)...); err != nil {
		return false, err
	}
	if err := c.Broker.Publish(ctx, msgs...); err != nil {
		return false, err
	}
	return true, nil
}

// carrierPair returns a broker and a backend harness on one server, the
// broker's calls replaced by mod.
func carrierPair(mod func(c *memCarrier)) workerPair {
	srv := &carrierServer{backends: map[*memorybackend.Backend]bool{}}
	bh := healthyBroker()
	bh.Caps.CarryPending = true
	bh.Caps.CarrySettle = true
	bh.Caps.CarryStart = true
	bh.New = func(t testing.TB) errand.Broker {
		c := &memCarrier{Broker: memorybroker.New(nil), server: srv}
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
	beh := healthyBackend()
	beh.New = func(t testing.TB, expiry time.Duration) errand.Backend {
		be := memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})
		srv.add(be)
		t.Cleanup(func() { be.Close() })
		return be
	}
	return workerPair{bh, beh}
}

// MemoryCarrierPair returns the harnesses of a memory broker that carries
// the PENDING writes of the memory backends made by the backend harness
// (the test-only reference of driver.PendingCarrier, for
// memory_test.go's self-run).
func MemoryCarrierPair() (BrokerHarness, BackendHarness) {
	p := carrierPair(nil)
	return p.broker, p.backend
}

// brokenPairs are broken carriers with the backend harness of their
// server; the worker targets name them "pair:NAME".
var brokenPairs = map[string]workerPair{
	// Publishes and drops the states: the task is not PENDING after
	// SendTask.
	"carrier-drops-states": carrierPair(func(c *memCarrier) {
		c.publish = func(c *memCarrier, _ *memorybackend.Backend, ctx context.Context, _ []*errand.TaskState, msgs []errand.Message) (bool, error) {
			return true, c.Broker.Publish(ctx, msgs...)
		}
	}),
	// Writes the states and publishes nothing, reporting success.
	"carrier-publishes-nothing": carrierPair(func(c *memCarrier) {
		c.publish = func(_ *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, _ []errand.Message) (bool, error) {
			return true, errors.Join(be.SetPendingIfAbsent(ctx, sts)...)
		}
	}),
	// A plain SET instead of SET NX: PENDING overwrites what a worker
	// recorded.
	"carrier-overwrites-states": carrierPair(func(c *memCarrier) {
		c.publish = func(c *memCarrier, be *memorybackend.Backend, ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
			if err := errors.Join(be.SetStates(ctx, sts)...); err != nil {
				return false, err
			}
			return true, c.Broker.Publish(ctx, msgs...)
		}
	}),
	// Writes the states, fails to publish (its ctx is done) and reports
	// published=true, the publish's error passed off as the states'.
	"carrier-published-despite-failure": carrierPair(func(c *memCarrier) {
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
	"carrier-carries-unknown-backend": carrierPair(func(c *memCarrier) {
		c.own = memorybackend.New(nil)
	}),
	// Starts every task it fetches, whatever spec.Tasks says.
	"start-carrier-starts-any-task": carrierPair(func(c *memCarrier) {
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
	"start-carrier-ignores-table": carrierPair(func(c *memCarrier) {
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
	"start-carrier-restarts-failure": carrierPair(func(c *memCarrier) {
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
	"start-carrier-starts-before-created": carrierPair(func(c *memCarrier) {
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
	"start-carrier-writes-nothing": carrierPair(func(c *memCarrier) {
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
	"settle-carrier-drops-states": carrierPair(func(c *memCarrier) {
		c.settle = func(c *memCarrier, _ *memorybackend.Backend, ctx context.Context, ds []*driver.Delivery, _ []*errand.TaskState) []error {
			return c.Broker.Ack(ctx, ds)
		}
	}),
	// Writes the states and acks nothing, reporting success: the messages
	// come back after their lease.
	"settle-carrier-acks-nothing": carrierPair(func(c *memCarrier) {
		c.settle = func(_ *memCarrier, be *memorybackend.Backend, ctx context.Context, _ []*driver.Delivery, sts []*errand.TaskState) []error {
			return be.SetStates(ctx, sts)
		}
	}),
	// Acks first and writes a state only where its ack succeeded: a lost
	// lease leaves the state unwritten.
	"settle-carrier-skips-lost-states": carrierPair(func(c *memCarrier) {
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
	workerTargets["Send/CarriedPending"] = "pair:carrier-drops-states"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Send/CarriedPending", "pair:carrier-publishes-nothing"},
		target{"Send/CarriedPending", "pair:carrier-overwrites-states"},
		target{"Send/CarriedPending", "pair:carrier-published-despite-failure"},
		target{"Send/CarriedPending", "pair:carrier-carries-unknown-backend"},
	)
	workerTargets["Settle/CarriedSettle"] = "pair:settle-carrier-drops-states"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Settle/CarriedSettle", "pair:settle-carrier-acks-nothing"},
		target{"Settle/CarriedSettle", "pair:settle-carrier-skips-lost-states"},
		target{"Settle/CarriedSettle", "pair:carrier-carries-unknown-backend"},
	)
	workerTargets["Start/CarriedStart"] = "pair:start-carrier-ignores-table"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Start/CarriedStart", "pair:start-carrier-starts-any-task"},
		target{"Start/CarriedStart", "pair:start-carrier-writes-nothing"},
		target{"Start/CarriedStart", "pair:start-carrier-restarts-failure"},
		target{"Start/CarriedStart", "pair:start-carrier-starts-before-created"},
		target{"Start/CarriedStart", "pair:carrier-carries-unknown-backend"},
	)
	// A carrier its harness does not declare.
	brokenBrokers["undeclared-carrier"] = func() BrokerHarness {
		h := carrierPair(nil).broker
		h.Caps.CarryPending = false
		return h
	}()
	extraBrokerTargets = append(extraBrokerTargets, target{"Capabilities", "undeclared-carrier"})
	brokenBrokers["undeclared-settle-carrier"] = func() BrokerHarness {
		h := carrierPair(nil).broker
		h.Caps.CarrySettle = false
		return h
	}()
	extraBrokerTargets = append(extraBrokerTargets, target{"Capabilities", "undeclared-settle-carrier"})
	brokenBrokers["undeclared-start-carrier"] = func() BrokerHarness {
		h := carrierPair(nil).broker
		h.Caps.CarryStart = false
		return h
	}()
	extraBrokerTargets = append(extraBrokerTargets, target{"Capabilities", "undeclared-start-carrier"})
}

// TestCarrierPairRefusesAnotherServer: the memory carrier carries only
// the backends of its own server (so the case's "does not share a server"
// path is the one a mismatched pair takes).
func TestCarrierPairRefusesAnotherServer(t *testing.T) {
	t.Parallel()
	a, b := carrierPair(nil), carrierPair(nil)
	br := a.broker.New(t).(driver.PendingCarrier)
	if br.CarryPending(a.backend.New(t, 0)) == nil {
		t.Fatalf("the memory carrier does not carry a backend of its own server")
	}
	if br.CarryPending(b.backend.New(t, 0)) != nil {
		t.Fatalf("the memory carrier carries a backend of another server")
	}
	m := runMock(t, func(mt testing.TB) { carriedPending(mt, workerPair{a.broker, b.backend}) })
	if m.Failed() {
		t.Fatalf("Send/CarriedPending fails on a pair that does not share a server (it must log and check nothing): %v", m.msgs)
	}
}

package conformance

// The fault scenarios test themselves like the cases do: each runs against
// a broken setup that must make it fail, and a healthy one that must pass.
// Processes and servers are in-memory stand-ins here: a "killed" worker
// makes no further broker call, a "stopped" server refuses every call until
// it is started, and a server that loses its data on a restart comes back
// empty.

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// faultTiming: short leases and prompts, so a broken setup fails fast.
var faultTiming = Timing{Lease: 100 * time.Millisecond, Prompt: 200 * time.Millisecond, Watchdog: 20 * time.Second}.withDefaults()

// ---- a killed worker, in process ----

var errKilled = errors.New("conformance self-test: this worker was killed")

// mortalBroker is a worker's view of the broker: once dead, every call
// fails, as no call leaves a killed process.
type mortalBroker struct {
	errand.Broker
	dead atomic.Bool
}

func (m *mortalBroker) Publish(ctx context.Context, msgs ...errand.Message) error {
	if m.dead.Load() {
		return errKilled
	}
	return m.Broker.Publish(ctx, msgs...)
}
func (m *mortalBroker) Fetch(ctx context.Context, q string, n int, lease time.Duration) ([]*driver.Delivery, error) {
	if m.dead.Load() {
		return nil, errKilled
	}
	ds, err := m.Broker.Fetch(ctx, q, n, lease)
	if m.dead.Load() {
		return nil, errKilled // taken by a process that died: left to their leases
	}
	return ds, err
}
func (m *mortalBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if m.dead.Load() {
		return driver.BatchErrors(len(ds), errKilled)
	}
	return m.Broker.Ack(ctx, ds)
}
func (m *mortalBroker) Release(ctx context.Context, d *driver.Delivery, nb time.Time) error {
	if m.dead.Load() {
		return errKilled
	}
	return m.Broker.Release(ctx, d, nb)
}
func (m *mortalBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if m.dead.Load() {
		return errKilled
	}
	return m.Broker.Extend(ctx, d, lease)
}
func (m *mortalBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if m.dead.Load() {
		return errKilled
	}
	return m.Broker.Reject(ctx, d, reason)
}
func (m *mortalBroker) Close() error { return nil } // the broker is the harness's

type inProcessWorker struct {
	w    *errand.Worker
	b    *mortalBroker
	once sync.Once
	done chan struct{}
}

func (p *inProcessWorker) exited() <-chan struct{} { return p.done }
func (p *inProcessWorker) output() string          { return "(in-process worker)" }
func (p *inProcessWorker) kill() {
	p.once.Do(func() {
		p.b.dead.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p.w.Shutdown(ctx) // cancels the tasks; their releases fail: the process is dead
		close(p.done)
	})
}

// spawnInProcess is the self-test's spawnFunc: the worker runs in this
// process on the harness's broker, which must be shared (sharedBroker).
func spawnInProcess(t testing.TB, h BrokerHarness, spec workerSpec) workerProcess {
	m := &mortalBroker{Broker: h.New(t)}
	w, err := startMarkWorker(m, spec)
	if err != nil {
		t.Fatalf("in-process worker: %v", err)
	}
	p := &inProcessWorker{w: w, b: m, done: make(chan struct{})}
	t.Cleanup(p.kill)
	return p
}

// sharedBroker makes h.New return one broker to every caller, as a server
// is one to every process.
func sharedBroker(h BrokerHarness) BrokerHarness {
	var once sync.Once
	var b errand.Broker
	newB := h.New
	h.New = func(t testing.TB) errand.Broker {
		once.Do(func() { b = newB(t) })
		return b
	}
	h.Timing = faultTiming
	return h
}

func workerKilledWith(h BrokerHarness) func(testing.TB) {
	return func(t testing.TB) { workerKilled(t, sharedBroker(h), spawnInProcess) }
}

// ---- a restarted server, in memory ----

var errDown = errors.New("conformance self-test: connection refused (server stopped)")

// simServer is a server holding a memory broker and a memory backend.
// Stopped, it refuses every call; with lose, a restart loses everything.
type simServer struct {
	mu      sync.Mutex
	down    bool
	lose    bool
	broker  *memorybroker.Broker
	backend *memorybackend.Backend
	gen     int // restarts so far
}

func newSimServer(lose bool) *simServer {
	return &simServer{lose: lose, broker: memorybroker.New(nil), backend: memorybackend.New(nil)}
}

func (s *simServer) Stop(testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	if s.lose {
		s.broker.Close()
		s.backend.Close()
		s.broker, s.backend = memorybroker.New(nil), memorybackend.New(nil)
		s.gen++
	}
}

func (s *simServer) Start(testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = false
}

func (s *simServer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broker.Close()
	s.backend.Close()
}

func (s *simServer) now() (*memorybroker.Broker, *memorybackend.Backend, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, nil, 0, errDown
	}
	return s.broker, s.backend, s.gen, nil
}

// simBroker is a client of the simServer's broker.
type simBroker struct{ s *simServer }

func (c simBroker) Publish(ctx context.Context, msgs ...errand.Message) error {
	b, _, _, err := c.s.now()
	if err != nil {
		return err
	}
	return b.Publish(ctx, msgs...)
}
func (c simBroker) Fetch(ctx context.Context, q string, n int, lease time.Duration) ([]*driver.Delivery, error) {
	b, _, gen, err := c.s.now()
	if err != nil {
		return nil, err
	}
	ds, err := b.Fetch(ctx, q, n, lease)
	if _, _, g, down := c.s.now(); down != nil || g != gen {
		// The server went away while the fetch waited: the connection broke.
		for _, d := range ds {
			b.Release(context.Background(), d, time.Time{})
		}
		return nil, errDown
	}
	return ds, err
}
func (c simBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	b, _, _, err := c.s.now()
	if err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return b.Ack(ctx, ds)
}
func (c simBroker) Release(ctx context.Context, d *driver.Delivery, nb time.Time) error {
	b, _, _, err := c.s.now()
	if err != nil {
		return err
	}
	return b.Release(ctx, d, nb)
}
func (c simBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	b, _, _, err := c.s.now()
	if err != nil {
		return err
	}
	return b.Extend(ctx, d, lease)
}
func (c simBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	b, _, _, err := c.s.now()
	if err != nil {
		return err
	}
	return b.Reject(ctx, d, reason)
}
func (c simBroker) Close() error { return nil }

// simBackend is a client of the simServer's backend. With hang, a state or
// group the restart lost reads as still pending: a waiter on a lost chord
// waits forever.
type simBackend struct {
	s    *simServer
	hang bool
}

func (c simBackend) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	_, b, _, err := c.s.now()
	if err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	return b.SetStates(ctx, sts)
}
func (c simBackend) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	_, b, _, err := c.s.now()
	if err != nil {
		return nil, err
	}
	st, err := b.GetState(ctx, id)
	if c.hang && errors.Is(err, errand.ErrTaskNotFound) {
		return &errand.TaskState{TaskUUID: id, State: errand.StatePending}, nil
	}
	return st, err
}
func (c simBackend) InitGroup(ctx context.Context, g string, ids []string) error {
	_, b, _, err := c.s.now()
	if err != nil {
		return err
	}
	return b.InitGroup(ctx, g, ids)
}
func (c simBackend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	_, b, _, err := c.s.now()
	if err != nil {
		return 0, 0, err
	}
	done, total, err := b.CompleteGroupMember(ctx, g, id)
	if c.hang && errors.Is(err, driver.ErrGroupNotFound) {
		return 1, math.MaxInt32, nil // a counter re-created from nothing: never complete
	}
	return done, total, err
}
func (c simBackend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	_, b, _, err := c.s.now()
	if err != nil {
		return false, err
	}
	return b.ClaimChord(ctx, g, claimer)
}
func (c simBackend) GroupStates(ctx context.Context, g string) ([]*errand.TaskState, error) {
	_, b, _, err := c.s.now()
	if err != nil {
		return nil, err
	}
	return b.GroupStates(ctx, g)
}
func (c simBackend) Close() error { return nil }

// simRestart is a RestartHarness over a fresh simServer holding the
// restarted drivers; the other driver is a healthy memory one.
type simRestart struct {
	on      Restarted
	lose    bool // the restart loses every message, state and group
	hang    bool // the backend reads what it lost as pending
	brokerC BrokerCaps
	backC   BackendCaps
}

func (r simRestart) run(t testing.TB) {
	s := newSimServer(r.lose)
	t.Cleanup(s.close)
	h := RestartHarness{Broker: healthyBroker(), Backend: healthyBackend(), Restarts: r.on, Stop: s.Stop, Start: s.Start}
	h.Broker.Timing, h.Backend.Timing = faultTiming, faultTiming
	if r.on&RestartsBroker != 0 {
		h.Broker.New = func(testing.TB) errand.Broker { return simBroker{s} }
		h.Broker.Caps = r.brokerC
	}
	if r.on&RestartsBackend != 0 {
		h.Backend.New = func(testing.TB, time.Duration) errand.Backend { return simBackend{s, r.hang} }
		h.Backend.Caps = r.backC
	}
	serverRestart(t, h)
}

// ---- the self-test ----

// faultSetups are the broken setups of the fault scenarios, each with the
// healthy setup the same scenario must pass.
var faultSetups = map[string]struct {
	scenario        string
	broken, healthy func(testing.TB)
}{
	// The broker loses what a worker took: a killed worker's tasks are gone.
	"loses-on-fetch": {"WorkerKilled", workerKilledWith(brokenBrokers["loses-on-fetch"]), workerKilledWith(healthyBroker())},
	// A broker declaring Durable whose restart empties its queues.
	"durable-broker-loses-queue": {"ServerRestart",
		simRestart{on: RestartsBroker, lose: true, brokerC: BrokerCaps{Durable: true}}.run,
		simRestart{on: RestartsBroker, brokerC: BrokerCaps{Durable: true}}.run},
	// A backend declaring Durable whose restart loses states and groups.
	"durable-backend-loses-states": {"ServerRestart",
		simRestart{on: RestartsBackend, lose: true, backC: BackendCaps{Durable: true}}.run,
		simRestart{on: RestartsBackend, backC: BackendCaps{Durable: true}}.run},
	// A lossy backend that reads what it lost as pending: the chord's
	// waiter hangs instead of being told.
	"lossy-backend-hangs": {"ServerRestart",
		simRestart{on: RestartsBackend, lose: true, hang: true, backC: BackendCaps{Lossy: true}}.run,
		simRestart{on: RestartsBackend, lose: true, backC: BackendCaps{Lossy: true}}.run},
	// A restarted backend declaring neither Durable nor Lossy.
	"restart-undeclared": {"ServerRestart",
		simRestart{on: RestartsBackend, backC: BackendCaps{}}.run,
		simRestart{on: RestartsBroker | RestartsBackend, brokerC: BrokerCaps{Durable: true}, backC: BackendCaps{Durable: true}}.run},
}

// faultScenarios are the kit's fault scenarios (RunWorkerKilled,
// RunServerRestart), for TestEveryCaseHasATarget.
var faultScenarios = []string{"WorkerKilled", "ServerRestart"}

func TestKitCatchesBrokenFaultHandling(t *testing.T) {
	for variant, setup := range faultSetups {
		t.Run(setup.scenario+"/"+variant, func(t *testing.T) {
			t.Parallel()
			expectFailure(t, variant, setup.broken, setup.healthy)
		})
	}
}

func TestRunPatternMatchesOnlyItsTest(t *testing.T) {
	if got, want := runPattern("TestX/Single/Fault/WorkerKilled#01"), `^TestX$/^Single$/^Fault$/^WorkerKilled#01$`; got != want {
		t.Fatalf("runPattern = %q, want %q", got, want)
	}
}

package conformance

// The kit tests itself: every case is run against a deliberately broken
// variant of the memory drivers and must fail. A case that cannot fail is a
// defect of the kit.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// mockT records failures instead of failing the real test; Fatal ends the
// case's goroutine like testing.T does.
type mockT struct {
	testing.TB // the real T: Name, TempDir, ...
	mu         sync.Mutex
	failed     bool
	msgs       []string
	cleanups   []func()
}

func (m *mockT) Helper() {}
func (m *mockT) Errorf(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = true
	m.msgs = append(m.msgs, fmt.Sprintf(format, args...))
}
func (m *mockT) Error(args ...any)                 { m.Errorf("%s", fmt.Sprint(args...)) }
func (m *mockT) Fatalf(format string, args ...any) { m.Errorf(format, args...); runtime.Goexit() }
func (m *mockT) Fatal(args ...any)                 { m.Error(args...); runtime.Goexit() }
func (m *mockT) Fail()                             { m.Errorf("Fail called") }
func (m *mockT) FailNow()                          { m.Fail(); runtime.Goexit() }
func (m *mockT) Failed() bool                      { m.mu.Lock(); defer m.mu.Unlock(); return m.failed }
func (m *mockT) Log(args ...any)                   {}
func (m *mockT) Logf(format string, args ...any)   {}
func (m *mockT) Cleanup(f func())                  { m.mu.Lock(); m.cleanups = append(m.cleanups, f); m.mu.Unlock() }

// runMock runs fn as a case on its own goroutine, then its cleanups.
func runMock(t *testing.T, fn func(testing.TB)) *mockT {
	m := &mockT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(m)
	}()
	<-done
	cleanupDone := make(chan struct{})
	go func() { // cleanups may Fatal too
		defer close(cleanupDone)
		for i := len(m.cleanups) - 1; i >= 0; i-- {
			m.cleanups[i]()
		}
	}()
	<-cleanupDone
	return m
}

var selfTiming = Timing{Lease: 100 * time.Millisecond, Delay: 150 * time.Millisecond, DelayBound: 60 * time.Millisecond, Prompt: 500 * time.Millisecond, Watchdog: 6 * time.Second}

// ---- broken brokers ----

type brokenBroker struct {
	*memorybroker.Broker
	fetch    func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error)
	publish  func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error
	release  func(b *brokenBroker, ctx context.Context, d *driver.Delivery, nb time.Time) error
	extend   func(b *brokenBroker, ctx context.Context, d *driver.Delivery, lease time.Duration) error
	reject   func(b *brokenBroker, ctx context.Context, d *driver.Delivery, reason string) error
	ack      func(b *brokenBroker, ctx context.Context, d *driver.Delivery) error // each delivery of a batch
	ackBatch func(b *brokenBroker, ctx context.Context, ds []*driver.Delivery) []error
	limits   *driver.Limits
	stats    func(b *brokenBroker, ctx context.Context, q string) (driver.QueueStats, error)
	purge    func(b *brokenBroker, ctx context.Context, q string) (int, error)
	// The operator's capabilities (selftest_operate_test.go).
	archive        func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error
	requeue        func(b *brokenBroker, ctx context.Context, q, id string, m errand.Message) error
	deleteArchived func(b *brokenBroker, ctx context.Context, q string, ids ...string) (int, error)
	list           func(b *brokenBroker, ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error)
	queues         func(b *brokenBroker, ctx context.Context) ([]string, error)
	pause          func(b *brokenBroker, ctx context.Context, q string) error
	beat           func(b *brokenBroker, ctx context.Context, id string, data []byte, ttl time.Duration) error
	unbeat         func(b *brokenBroker, ctx context.Context, id string) error
	find           func(b *brokenBroker, ctx context.Context, q, id string) (driver.Listed, driver.ListState, bool, error)
	// The schedule store (selftest_schedule_test.go).
	schedules brokenSchedules
}

// Ack acks each delivery through the variant's ack when it breaks single
// acks, or hands the batch to its ackBatch when it breaks batches.
func (b *brokenBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if b.ackBatch != nil {
		return b.ackBatch(b, ctx, ds)
	}
	if b.ack == nil {
		return b.Broker.Ack(ctx, ds)
	}
	errs := make([]error, len(ds))
	for i, d := range ds {
		errs[i] = b.ack(b, ctx, d)
	}
	return errs
}

// ack1 acks d alone on the healthy memory broker b.
func ack1(b *memorybroker.Broker, ctx context.Context, d *driver.Delivery) error {
	return errors.Join(b.Ack(ctx, []*driver.Delivery{d})...)
}

// set1 writes st alone on the healthy memory backend b.
func set1(b *memorybackend.Backend, ctx context.Context, st *errand.TaskState) error {
	return errors.Join(b.SetStates(ctx, []*errand.TaskState{st})...)
}

func (b *brokenBroker) Fetch(ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
	if b.fetch != nil {
		return b.fetch(b, ctx, q, max, lease)
	}
	return b.Broker.Fetch(ctx, q, max, lease)
}
func (b *brokenBroker) Publish(ctx context.Context, msgs ...errand.Message) error {
	if b.publish != nil {
		return b.publish(b, ctx, msgs...)
	}
	return b.Broker.Publish(ctx, msgs...)
}
func (b *brokenBroker) Release(ctx context.Context, d *driver.Delivery, nb time.Time) error {
	if b.release != nil {
		return b.release(b, ctx, d, nb)
	}
	return b.Broker.Release(ctx, d, nb)
}
func (b *brokenBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if b.extend != nil {
		return b.extend(b, ctx, d, lease)
	}
	return b.Broker.Extend(ctx, d, lease)
}
func (b *brokenBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if b.reject != nil {
		return b.reject(b, ctx, d, reason)
	}
	return b.Broker.Reject(ctx, d, reason)
}

// Colocate answers nil: errand takes the portable path over a broken
// broker, so its broken calls are the ones the cases exercise (the
// memory broker's own co-location would call its healthy methods).
func (b *brokenBroker) Colocate(driver.Backend) driver.Colocation { return nil }

func (b *brokenBroker) Limits() driver.Limits {
	if b.limits != nil {
		return *b.limits
	}
	return b.Broker.Limits()
}
func (b *brokenBroker) Stats(ctx context.Context, q string) (driver.QueueStats, error) {
	if b.stats != nil {
		return b.stats(b, ctx, q)
	}
	return b.Broker.Stats(ctx, q)
}
func (b *brokenBroker) Purge(ctx context.Context, q string) (int, error) {
	if b.purge != nil {
		return b.purge(b, ctx, q)
	}
	return b.Broker.Purge(ctx, q)
}

func healthyBroker() BrokerHarness {
	return BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := memorybroker.New(nil)
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: BrokerCaps{OrderedByETA: true, DetectsLostLease: true, Priority: true, Purge: true, Stats: true,
			Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true, Schedules: true,
			Unique: true, RateLimit: true, Colocate: true, Tx: true, CancelNotify: true, Concurrency: true},
		Timing:  selfTiming,
		PushRaw: pushRawMemory,
		BeginTx: beginMemoryTx,
	}
}

func brokenBrokerHarness(mod func(b *brokenBroker)) BrokerHarness {
	h := healthyBroker()
	h.New = func(t testing.TB) errand.Broker {
		b := &brokenBroker{Broker: memorybroker.New(nil)}
		mod(b)
		t.Cleanup(func() { b.Broker.Close() })
		return b
	}
	return h
}

var brokenBrokers = map[string]BrokerHarness{
	// Removes a message when it is fetched: a crashed consumer loses it.
	"loses-on-fetch": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ds, err := b.Broker.Fetch(ctx, q, max, lease)
			b.Broker.Ack(ctx, ds)
			return ds, err
		}
		b.ack = func(*brokenBroker, context.Context, *driver.Delivery) error { return nil }
	}),
	// Ignores NotBefore on publish: delivers delayed messages at once.
	"delivers-early": brokenBrokerHarness(func(b *brokenBroker) {
		b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
			for i := range msgs {
				msgs[i].NotBefore = time.Time{}
			}
			return b.Broker.Publish(ctx, msgs...)
		}
	}),
	"release-ignores-not-before": brokenBrokerHarness(func(b *brokenBroker) {
		b.release = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, _ time.Time) error {
			return b.Broker.Release(ctx, d, time.Time{})
		}
	}),
	// Release drops the message instead of requeueing it.
	"release-drops": brokenBrokerHarness(func(b *brokenBroker) {
		b.release = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, _ time.Time) error {
			return ack1(b.Broker, ctx, d)
		}
	}),
	"extend-is-a-no-op": brokenBrokerHarness(func(b *brokenBroker) {
		b.extend = func(*brokenBroker, context.Context, *driver.Delivery, time.Duration) error { return nil }
	}),
	// Hands a message out without a lease: others see it at once.
	"no-lease": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ds, err := b.Broker.Fetch(ctx, q, max, lease)
			for _, d := range ds {
				b.Broker.Release(ctx, d, time.Time{})
			}
			return ds, err
		}
	}),
	// Ignores its ctx for a while.
	"fetch-ignores-ctx": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, _ context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*selfTiming.Prompt)
			defer cancel()
			return b.Broker.Fetch(ctx, q, max, lease)
		}
	}),
	// Close does not wake a blocked Fetch: it waits out its ctx.
	"close-leaves-fetch-blocked": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ds, err := b.Broker.Fetch(ctx, q, max, lease)
			if errors.Is(err, errand.ErrClosed) {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return ds, err
		}
	}),
	// Declares a payload limit larger than what it carries.
	"carries-less-than-declared": func() BrokerHarness {
		h := brokenBrokerHarness(func(b *brokenBroker) {
			b.limits = &driver.Limits{MaxPayload: 4096}
			b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
				for _, m := range msgs {
					if len(m.Body) > 2048 {
						return fmt.Errorf("message %s: %w", m.ID, errand.ErrPayloadTooLarge)
					}
				}
				return b.Broker.Publish(ctx, msgs...)
			}
		})
		h.Caps.MaxPayload = 4096
		return h
	}(),
	// Ack reports success for every delivery of a batch but acks all but
	// the last.
	"batch-ack-skips-last": brokenBrokerHarness(func(b *brokenBroker) {
		b.ackBatch = func(b *brokenBroker, ctx context.Context, ds []*driver.Delivery) []error {
			if len(ds) > 1 {
				b.Broker.Ack(ctx, ds[:len(ds)-1])
			}
			return nil
		}
	}),
	// One lost lease fails the whole batch: Ack answers the lost lease's
	// error for every delivery and acks none (one error for the call, as
	// before the batch convention).
	"ack-fails-whole-batch": brokenBrokerHarness(func(b *brokenBroker) {
		b.ackBatch = func(b *brokenBroker, ctx context.Context, ds []*driver.Delivery) []error {
			for _, d := range ds {
				if err := b.Broker.Extend(ctx, d, time.Minute); err != nil {
					return driver.BatchErrors(len(ds), err)
				}
			}
			return b.Broker.Ack(ctx, ds)
		}
	}),
	// Answers only the errors of the deliveries that failed, not one per
	// delivery: the caller cannot tell whose ack failed.
	"ack-answers-failures-only": brokenBrokerHarness(func(b *brokenBroker) {
		b.ackBatch = func(b *brokenBroker, ctx context.Context, ds []*driver.Delivery) []error {
			var failed []error
			for _, err := range b.Broker.Ack(ctx, ds) {
				if err != nil {
					failed = append(failed, err)
				}
			}
			return failed
		}
	}),
	// Fetch acks and drops what it cannot parse as a task: foreign bytes
	// vanish without a trace (issue 14, item 1, the Redis bug).
	"drops-foreign-bytes": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ds, err := b.Broker.Fetch(ctx, q, max, lease)
			var kept []*driver.Delivery
			for _, d := range ds {
				if _, derr := errand.DecodeSignature(d.Body); derr != nil {
					ack1(b.Broker, ctx, d)
					continue
				}
				kept = append(kept, d)
			}
			return kept, err
		}
	}),
	// Reject (and Archive, which errand uses instead on an Archiver) puts
	// the message back: a poison message loops forever.
	"reject-requeues": brokenBrokerHarness(func(b *brokenBroker) {
		b.reject = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, _ string) error {
			return b.Broker.Release(ctx, d, time.Time{})
		}
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, _ driver.ArchiveEntry, _ driver.Retention) error {
			return b.Broker.Release(ctx, d, time.Time{})
		}
	}),
	"batch-drops-last": brokenBrokerHarness(func(b *brokenBroker) {
		b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
			if len(msgs) > 1 {
				msgs = msgs[:len(msgs)-1]
			}
			return b.Broker.Publish(ctx, msgs...)
		}
	}),
	// Reports success for every publish but stores only every other message.
	"drops-every-other-publish": brokenBrokerHarness(func(b *brokenBroker) {
		n := 0
		var mu sync.Mutex
		b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
			mu.Lock()
			defer mu.Unlock()
			var kept []errand.Message
			for _, m := range msgs {
				if n++; n%2 == 1 {
					kept = append(kept, m)
				}
			}
			if len(kept) == 0 {
				return nil
			}
			return b.Broker.Publish(ctx, kept...)
		}
	}),
	// Counts the first delivery of a message as its second: a second message
	// reusing a running task's UUID looks like a redelivery.
	"first-delivery-counted-twice": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ds, err := b.Broker.Fetch(ctx, q, max, lease)
			for _, d := range ds {
				d.Attempt++
			}
			return ds, err
		}
	}),
	// Reports every delivery as the first: a release resets the count.
	"release-resets-count": brokenBrokerHarness(func(b *brokenBroker) {
		b.fetch = func(b *brokenBroker, ctx context.Context, q string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			ds, err := b.Broker.Fetch(ctx, q, max, lease)
			for _, d := range ds {
				d.Attempt = 1
			}
			return ds, err
		}
	}),
	// Carries each message without its signature's Headers.
	"drops-headers": brokenBrokerHarness(func(b *brokenBroker) {
		b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
			for i, m := range msgs {
				var fields map[string]json.RawMessage
				if json.Unmarshal(m.Body, &fields) == nil {
					delete(fields, "Headers")
					msgs[i].Body, _ = json.Marshal(fields)
				}
			}
			return b.Broker.Publish(ctx, msgs...)
		}
	}),
	// Release of a delivery whose lease was lost puts the message back
	// anyway (an LPUSH of the body, not checking the lease): a late
	// settle brings back a message another consumer finished.
	"release-ignores-lost-lease": brokenBrokerHarness(func(b *brokenBroker) {
		b.release = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, nb time.Time) error {
			err := b.Broker.Release(ctx, d, nb)
			if errors.Is(err, driver.ErrLeaseLost) {
				m := d.Message
				m.NotBefore = nb
				return b.Broker.Publish(ctx, m)
			}
			return err
		}
	}),
	"ack-is-a-no-op": brokenBrokerHarness(func(b *brokenBroker) {
		b.ack = func(*brokenBroker, context.Context, *driver.Delivery) error { return nil }
	}),
	// Counts what is delivered as pending still.
	"stats-misses-in-flight": brokenBrokerHarness(func(b *brokenBroker) {
		b.stats = func(b *brokenBroker, ctx context.Context, q string) (driver.QueueStats, error) {
			st, err := b.Broker.Stats(ctx, q)
			st.Pending += st.InFlight
			st.InFlight = 0
			return st, err
		}
	}),
	"purge-keeps-messages": brokenBrokerHarness(func(b *brokenBroker) {
		b.purge = func(b *brokenBroker, ctx context.Context, q string) (int, error) {
			st, err := b.Broker.Stats(ctx, q)
			return st.Pending + st.Delayed, err
		}
	}),
	// Delivers by publish order whatever Message.Priority says.
	"ignores-priority": brokenBrokerHarness(func(b *brokenBroker) {
		b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
			for i := range msgs {
				msgs[i].Priority = 0
			}
			return b.Broker.Publish(ctx, msgs...)
		}
	}),
	// Keeps every queue's messages in one: Fetch of a queue hands out any
	// queue's (queues.go's weights, strict order and caps see the wrong
	// queue's tasks).
	"routes-every-queue-to-one": brokenBrokerHarness(func(b *brokenBroker) {
		b.publish = func(b *brokenBroker, ctx context.Context, msgs ...errand.Message) error {
			for i := range msgs {
				msgs[i].Queue = "one-for-all"
			}
			return b.Broker.Publish(ctx, msgs...)
		}
		b.fetch = func(b *brokenBroker, ctx context.Context, _ string, max int, lease time.Duration) ([]*driver.Delivery, error) {
			return b.Broker.Fetch(ctx, "one-for-all", max, lease)
		}
	}),
	// Implements purging but does not declare it.
	"undeclared-capability": func() BrokerHarness {
		h := healthyBroker()
		h.Caps.Purge = false
		return h
	}(),
}

func init() {
	for name, h := range brokenOperators {
		brokenBrokers[name] = h
	}
	for name, h := range brokenScheduleStores {
		brokenBrokers[name] = h
	}
}

// ---- broken backends ----

type brokenBackend struct {
	*memorybackend.Backend
	setState    func(b *brokenBackend, ctx context.Context, st *errand.TaskState) error
	getState    func(b *brokenBackend, ctx context.Context, id string) (*errand.TaskState, error)
	complete    func(b *brokenBackend, ctx context.Context, g, id string) (int, int, error)
	claim       func(b *brokenBackend, ctx context.Context, g, claimer string) (bool, error)
	groupStates func(b *brokenBackend, ctx context.Context, g string) ([]*errand.TaskState, error)
	initGroup   func(b *brokenBackend, ctx context.Context, g string, ids []string) error
	setStates   func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error
	waitState   func(b *brokenBackend, ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error)
	start       func(b *brokenBackend, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult

	mu      sync.Mutex
	counts  map[string]int
	claimed map[string]bool
	born    map[string]time.Time
	expiry  time.Duration
}

// SetStates writes the batch through the variant's setStates when it
// breaks batches, or each state through its setState when it breaks
// single states.
func (b *brokenBackend) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	if b.setStates != nil {
		return b.setStates(b, ctx, sts)
	}
	if b.setState == nil {
		return b.Backend.SetStates(ctx, sts)
	}
	errs := make([]error, len(sts))
	for i, st := range sts {
		errs[i] = b.setState(b, ctx, st)
	}
	return errs
}
func (b *brokenBackend) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	if b.getState != nil {
		return b.getState(b, ctx, id)
	}
	return b.Backend.GetState(ctx, id)
}
func (b *brokenBackend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	if b.complete != nil {
		return b.complete(b, ctx, g, id)
	}
	return b.Backend.CompleteGroupMember(ctx, g, id)
}
func (b *brokenBackend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	if b.claim != nil {
		return b.claim(b, ctx, g, claimer)
	}
	return b.Backend.ClaimChord(ctx, g, claimer)
}
func (b *brokenBackend) GroupStates(ctx context.Context, g string) ([]*errand.TaskState, error) {
	if b.groupStates != nil {
		return b.groupStates(b, ctx, g)
	}
	return b.Backend.GroupStates(ctx, g)
}
func (b *brokenBackend) InitGroup(ctx context.Context, g string, ids []string) error {
	if b.initGroup != nil {
		return b.initGroup(b, ctx, g, ids)
	}
	return b.Backend.InitGroup(ctx, g, ids)
}
func (b *brokenBackend) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	if b.start != nil {
		return b.start(b, ctx, reqs)
	}
	return b.Backend.Start(ctx, reqs)
}
func (b *brokenBackend) WaitState(ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error) {
	if b.waitState != nil {
		return b.waitState(b, ctx, id, done)
	}
	return b.Backend.WaitState(ctx, id, done)
}

func healthyBackend() BackendHarness {
	return BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps:   BackendCaps{Expiry: true, Waiter: true, Start: true, PendingIfAbsent: true, Located: true, Tx: true, Cancel: true, MinExpiry: 80 * time.Millisecond},
		Timing: selfTiming,
	}
}

func brokenBackendHarness(mod func(b *brokenBackend)) BackendHarness {
	h := healthyBackend()
	h.New = func(t testing.TB, expiry time.Duration) errand.Backend {
		b := &brokenBackend{Backend: memorybackend.New(&memorybackend.Options{ResultExpiry: expiry}),
			counts: map[string]int{}, claimed: map[string]bool{}, born: map[string]time.Time{}, expiry: expiry}
		mod(b)
		t.Cleanup(func() { b.Backend.Close() })
		return b
	}
	return h
}

var brokenBackends = map[string]BackendHarness{
	// Counts every completion, redeliveries included.
	"double-counts": brokenBackendHarness(func(b *brokenBackend) {
		b.complete = func(b *brokenBackend, ctx context.Context, g, id string) (int, int, error) {
			_, n, err := b.Backend.CompleteGroupMember(ctx, g, id)
			b.mu.Lock()
			defer b.mu.Unlock()
			b.counts[g]++
			return b.counts[g], n, err
		}
	}),
	// Derives done from member states (machinery's O(N) way).
	"counts-from-states": brokenBackendHarness(func(b *brokenBackend) {
		b.complete = func(b *brokenBackend, ctx context.Context, g, id string) (int, int, error) {
			_, n, err := b.Backend.CompleteGroupMember(ctx, g, id)
			sts, _ := b.Backend.GroupStates(ctx, g)
			done := 0
			for _, st := range sts {
				if st.State.Terminal() {
					done++
				}
			}
			return done, n, err
		}
	}),
	// Counts any UUID completed in a group, members or not (issue 15): stray
	// messages naming the group fire its chord early.
	"counts-strays": brokenBackendHarness(func(b *brokenBackend) {
		total, done := map[string]int{}, map[string]map[string]bool{}
		b.initGroup = func(b *brokenBackend, ctx context.Context, g string, ids []string) error {
			b.mu.Lock()
			total[g], done[g] = len(ids), map[string]bool{}
			b.mu.Unlock()
			return b.Backend.InitGroup(ctx, g, ids)
		}
		b.complete = func(b *brokenBackend, ctx context.Context, g, id string) (int, int, error) {
			if _, _, err := b.Backend.CompleteGroupMember(ctx, g, id); err != nil && !errors.Is(err, driver.ErrNotMember) {
				return 0, 0, err
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			done[g][id] = true
			return len(done[g]), total[g], nil
		}
	}),
	// Stores every state that has a StartedAt with one a millisecond
	// before its CreatedAt (issue 31: a start cut to another clock's
	// milliseconds): a worker's task reads back started before it was
	// created.
	"started-before-created": brokenBackendHarness(func(b *brokenBackend) {
		b.setState = func(b *brokenBackend, ctx context.Context, st *errand.TaskState) error {
			if !st.StartedAt.IsZero() {
				st = st.Copy()
				st.StartedAt = st.CreatedAt.Add(-time.Millisecond)
			}
			return errors.Join(b.Backend.SetStates(ctx, []*errand.TaskState{st})...)
		}
	}),
	"every-claimer-wins": brokenBackendHarness(func(b *brokenBackend) {
		b.claim = func(*brokenBackend, context.Context, string, string) (bool, error) { return true, nil }
	}),
	// A claim is plain "first call wins": the same claimer loses on redelivery.
	"claimer-cannot-reclaim": brokenBackendHarness(func(b *brokenBackend) {
		b.claim = func(b *brokenBackend, ctx context.Context, g, claimer string) (bool, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.claimed[g] {
				return false, nil
			}
			b.claimed[g] = true
			return true, nil
		}
	}),
	"group-states-reversed": brokenBackendHarness(func(b *brokenBackend) {
		b.groupStates = func(b *brokenBackend, ctx context.Context, g string) ([]*errand.TaskState, error) {
			sts, err := b.Backend.GroupStates(ctx, g)
			slices.Reverse(sts)
			return sts, err
		}
	}),
	// Reports the expiry it was given but keeps results for an hour.
	"never-expires": func() BackendHarness {
		h := healthyBackend()
		h.New = func(t testing.TB, expiry time.Duration) errand.Backend {
			b := &lyingExpiry{Backend: memorybackend.New(&memorybackend.Options{ResultExpiry: time.Hour}), expiry: expiry}
			t.Cleanup(func() { b.Close() })
			return b
		}
		return h
	}(),
	// Group metadata expires one result expiry after creation (machinery#352).
	"group-dies-with-results": brokenBackendHarness(func(b *brokenBackend) {
		b.initGroup = func(b *brokenBackend, ctx context.Context, g string, ids []string) error {
			b.mu.Lock()
			b.born[g] = time.Now()
			b.mu.Unlock()
			return b.Backend.InitGroup(ctx, g, ids)
		}
		b.complete = func(b *brokenBackend, ctx context.Context, g, id string) (int, int, error) {
			b.mu.Lock()
			born := b.born[g]
			b.mu.Unlock()
			if b.expiry > 0 && time.Since(born) > b.expiry {
				return 0, 0, driver.ErrGroupNotFound
			}
			return b.Backend.CompleteGroupMember(ctx, g, id)
		}
	}),
	// Unknown IDs read as PENDING instead of an error.
	"unknown-is-pending": brokenBackendHarness(func(b *brokenBackend) {
		b.getState = func(b *brokenBackend, ctx context.Context, id string) (*errand.TaskState, error) {
			st, err := b.Backend.GetState(ctx, id)
			if errors.Is(err, errand.ErrTaskNotFound) {
				return &errand.TaskState{TaskUUID: id, State: errand.StatePending}, nil
			}
			return st, err
		}
	}),
	"drops-results": brokenBackendHarness(func(b *brokenBackend) {
		b.setState = func(b *brokenBackend, ctx context.Context, st *errand.TaskState) error {
			st = st.Copy()
			st.Results = nil
			return set1(b.Backend, ctx, st)
		}
	}),
	// Stores FAILURE as SUCCESS (an update that ignores the state field).
	"failure-stored-as-success": brokenBackendHarness(func(b *brokenBackend) {
		b.setState = func(b *brokenBackend, ctx context.Context, st *errand.TaskState) error {
			if st.State == errand.StateFailure {
				st = st.Copy()
				st.State = errand.StateSuccess
			}
			return set1(b.Backend, ctx, st)
		}
	}),
	// Stores a failure's text but not its kind (an encoding that misses
	// the newer fields).
	"drops-error-kind": brokenBackendHarness(func(b *brokenBackend) {
		drop := func(st *errand.TaskState) *errand.TaskState {
			st = st.Copy()
			st.ErrorKind, st.ErrorDetail = "", ""
			return st
		}
		b.setStates = func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error {
			out := make([]*errand.TaskState, len(sts))
			for i, st := range sts {
				out[i] = drop(st)
			}
			return b.Backend.SetStates(ctx, out)
		}
	}),
	// A batch write that loses its last state (and answers for the
	// others only).
	// Stores every state without its progress (errand.SetProgress).
	"drops-progress": brokenBackendHarness(func(b *brokenBackend) {
		b.setStates = func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error {
			out := make([]*errand.TaskState, len(sts))
			for i, st := range sts {
				out[i] = st.Copy()
				out[i].Progress = nil
			}
			return b.Backend.SetStates(ctx, out)
		}
	}),
	// Start answers with the previous state stripped of its progress.
	"start-prev-drops-progress": brokenBackendHarness(func(b *brokenBackend) {
		b.start = func(b *brokenBackend, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			res := b.Backend.Start(ctx, reqs)
			for i := range res {
				if res[i].Prev != nil {
					res[i].Prev = res[i].Prev.Copy()
					res[i].Prev.Progress = nil
				}
			}
			return res
		}
	}),
	"batch-drops-last": brokenBackendHarness(func(b *brokenBackend) {
		b.setStates = func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error {
			if len(sts) < 2 {
				return b.Backend.SetStates(ctx, sts)
			}
			return b.Backend.SetStates(ctx, sts[:len(sts)-1])
		}
	}),
	// Writes every state but answers one error for the call instead of
	// one per state: a lone failure is reported for the whole batch.
	"set-states-answers-once": brokenBackendHarness(func(b *brokenBackend) {
		b.setStates = func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error {
			errs := b.Backend.SetStates(ctx, sts)
			if len(sts) > 1 {
				return []error{errors.Join(errs...)}
			}
			return errs
		}
	}),
	// Waiters are never woken by writes.
	"waiters-never-woken": brokenBackendHarness(func(b *brokenBackend) {
		b.waitState = func(b *brokenBackend, ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error) {
			st, err := b.Backend.GetState(ctx, id)
			if err == nil && done(st) {
				return st, nil
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}),
	"undeclared-capability": func() BackendHarness {
		h := healthyBackend()
		h.Caps.Waiter = false
		return h
	}(),
	// Promises to keep everything across a restart and that it may lose it.
	"durable-and-lossy": func() BackendHarness {
		h := healthyBackend()
		h.Caps.Durable, h.Caps.Lossy = true, true
		return h
	}(),
}

type lyingExpiry struct {
	*memorybackend.Backend
	expiry time.Duration
}

func (l *lyingExpiry) ResultExpiry() time.Duration { return l.expiry }

// ---- the self-test ----

// targets maps every case to the broken variant that must make it fail.
var brokerTargets = map[string]string{
	"Capabilities":                 "undeclared-capability",
	"PublishFetchAck":              "ack-is-a-no-op",
	"BatchPublish":                 "batch-drops-last",
	"Release/Immediate":            "release-drops",
	"Release/NotBefore":            "release-ignores-not-before",
	"Redelivery/LeaseExpired":      "loses-on-fetch",
	"Lease/ExtendKeepsAway":        "extend-is-a-no-op",
	"Lease/ConcurrentConsumers":    "no-lease",
	"Delay/NeverEarly":             "delivers-early",
	"Delay/OrderByETA":             "delivers-early",
	"Delay/BeyondMax":              "delivers-early",
	"Ctx/FetchCancel":              "fetch-ignores-ctx",
	"Close/WakesFetch":             "close-leaves-fetch-blocked",
	"Payload/Limit":                "carries-less-than-declared",
	"Ack/PerItem":                  "ack-fails-whole-batch",
	"Ack/Concurrent":               "batch-ack-skips-last",
	"BadMessage/SetAside":          "reject-requeues",
	"Stats/Counts":                 "stats-misses-in-flight",
	"Purge":                        "purge-keeps-messages",
	"Archive/KeepsEntry":           "archive-loses-error",
	"Archive/Retention":            "retention-ignored",
	"Archive/Requeue":              "requeue-not-atomic",
	"Archive/Delete":               "delete-archived-keeps",
	"Archive/LeaseLost":            "archive-ignores-lease",
	"Archive/PageBounds":           "page-limit-zero-accepted",
	"List/ByState":                 "list-wrong-state",
	"List/Find":                    "find-misses-in-flight",
	"Queues/Lists":                 "queues-from-contents",
	"Queues/Known":                 "queues-from-contents",
	"Pause/Flag":                   "pause-flag-lost",
	"Heartbeat/TTL":                "heartbeat-never-expires",
	"Unique/Lock":                  "unlock-ignores-holder",
	"Unique/Concurrent":            "lock-not-atomic",
	"RateLimit/Bucket":             "bucket-never-refills",
	"Schedule/Store":               "schedule-change-lost",
	"Schedule/ClaimOnce":           "claim-not-atomic",
	"Schedule/DeleteForgetsClaims": "delete-keeps-claims",
	"Priority/Order":               "ignores-priority",
}

// moreBrokerTargets are second variants for cases with more than one promise.
var moreBrokerTargets = map[string]string{
	"Ack/PerItem":        "ack-answers-failures-only",
	"PublishFetchAck":    "first-delivery-counted-twice",
	"Release/Immediate":  "release-resets-count",
	"Capabilities":       "undeclared-archive",
	"Archive/Retention":  "retention-ignores-age",
	"Archive/KeepsEntry": "archive-empty-message-loses-body",
	"List/ByState":       "completed-oldest-first",
	"Heartbeat/TTL":      "unbeat-is-a-no-op",
	"Unique/Lock":        "lock-never-expires",
	"RateLimit/Bucket":   "no-limit",
	"Schedule/Store":     "delete-keeps-schedule",
	"Schedule/ClaimOnce": "claim-accepts-older",
	"Queues/Known":       "knows-every-queue",
}

var backendTargets = map[string]string{
	"Capabilities":               "undeclared-capability",
	"State/RoundTrip":            "drops-results",
	"State/Unknown":              "unknown-is-pending",
	"State/Expiry":               "never-expires",
	"State/Wait":                 "waiters-never-woken",
	"State/Batch":                "batch-drops-last",
	"Group/CompleteIdempotent":   "double-counts",
	"Group/CountWithoutStates":   "counts-from-states",
	"Group/StatesInOrder":        "group-states-reversed",
	"Group/OutlivesResultExpiry": "group-dies-with-results",
	"Group/NonMemberNotCounted":  "counts-strays",
	"Chord/ClaimOnce":            "every-claimer-wins",
	"State/Progress":             "drops-progress",
}

var moreBackendTargets = map[string]string{
	"State/RoundTrip": "drops-error-kind",
	"State/Batch":     "set-states-answers-once",
	"Chord/ClaimOnce": "claimer-cannot-reclaim",
	"Capabilities":    "durable-and-lossy",
	"State/Progress":  "start-prev-drops-progress",
}

// workerTargets name a broken broker ("broker:NAME") or backend
// ("backend:NAME") for each worker case.
var workerTargets = map[string]string{
	"Capabilities":                "broker:undeclared-capability",
	"Task/ArgumentRoundTrip":      "backend:drops-results",
	"Task/HeadersRoundTrip":       "broker:drops-headers",
	"Retry/Fibonacci":             "broker:delivers-early",
	"Retry/Policy":                "broker:delivers-early",
	"Retry/Later":                 "broker:delivers-early",
	"Retry/Permanent":             "backend:failure-stored-as-success",
	"Chain/ArgumentOrder":         "backend:drops-results",
	"Group/Results":               "backend:drops-results",
	"Chord/ArgumentOrder":         "backend:group-states-reversed",
	"Chord/MemberFails":           "backend:failure-stored-as-success",
	"Chord/StraysIgnored":         "backend:counts-strays",
	"Callbacks/OnSuccessOnError":  "broker:drops-every-other-publish",
	"Failure/Panic":               "backend:failure-stored-as-success",
	"Failure/Timeout":             "backend:failure-stored-as-success",
	"Failure/UnknownTask":         "backend:failure-stored-as-success",
	"Failure/BadArguments":        "backend:failure-stored-as-success",
	"Failure/KindsReachProducer":  "backend:drops-error-kind",
	"BadMessage/WorkerGoesOn":     "broker:reject-requeues",
	"BadMessage/ForgedUUID":       "broker:first-delivery-counted-twice",
	"BadMessage/ForeignBytes":     "broker:drops-foreign-bytes",
	"Redelivery/CrashedWorker":    "broker:loses-on-fetch",
	"Shutdown/ReleasesUnfinished": "broker:release-drops",
	"Shutdown/KeepsLateResults":   "broker:release-drops",
	"Lease/LostCancelsTask":       "broker:release-ignores-lost-lease",
	"Archive/FailedTask":          "broker:archive-acks-instead",
	"Archive/Undecodable":         "broker:archive-drops-body",
	"Pause":                       "broker:pause-flag-lost",
	"Heartbeat":                   "broker:unbeat-is-a-no-op",
	"Unique/ReleasedOnFinish":     "broker:unlock-is-a-no-op",
	"RateLimit/Delays":            "broker:no-limit",
	"Queues/Weighted":             "broker:routes-every-queue-to-one",
	"Queues/Strict":               "broker:routes-every-queue-to-one",
	"Queues/Cap":                  "broker:routes-every-queue-to-one",
	"Snooze":                      "broker:delivers-early",
	"Progress":                    "backend:drops-progress",
}

// extraBrokerTargets, extraBackendTargets and extraWorkerTargets are
// further variants for cases that already have their targets above
// (registered by the selftest files' init functions). A worker target
// "pair:NAME" names a broken broker and backend pair of brokenPairs; its
// healthy run is the correct pair.
var extraBrokerTargets, extraBackendTargets, extraWorkerTargets []target

func init() {
	// Every worker case reads its tasks' states back when it ends: the
	// order of their times is checked there (recorder.checkPaths).
	extraWorkerTargets = append(extraWorkerTargets, target{"Task/ArgumentRoundTrip", "backend:started-before-created"})
	// A snoozed task's RETRY is stored with ErrorKind snoozed, its
	// failure past MaxSnoozes with its kind.
	extraWorkerTargets = append(extraWorkerTargets, target{"Snooze", "backend:drops-error-kind"})
	// A pair's backend is checked as well as its broker.
	extraWorkerTargets = append(extraWorkerTargets, target{"Capabilities", "backend:undeclared-capability"})
}

func TestEveryCaseHasATarget(t *testing.T) {
	check := func(kind string, names []string, targets map[string]string) {
		for _, n := range names {
			if _, ok := targets[n]; !ok {
				t.Errorf("%s case %s has no broken variant: a case never shown to fail is a defect", kind, n)
			}
		}
		if len(targets) != len(names) {
			t.Errorf("%s targets name %d cases, the kit has %d", kind, len(targets), len(names))
		}
	}
	check("broker", caseNames(brokerCases), brokerTargets)
	check("backend", caseNames(backendCases), backendTargets)
	check("worker", caseNames(workerCases), workerTargets)
	// And every broken variant is some case's target.
	used := map[string]bool{}
	for _, m := range []map[string]string{brokerTargets, moreBrokerTargets, backendTargets, moreBackendTargets, workerTargets} {
		for _, v := range m {
			if _, after, ok := strings.Cut(v, ":"); ok {
				v = after // worker targets name "broker:X", "backend:X" or "pair:X"
			}
			used[v] = true
		}
	}
	for _, tg := range slices.Concat(extraBrokerTargets, extraBackendTargets, extraWorkerTargets) {
		_, v, ok := strings.Cut(tg.variant, ":")
		if !ok {
			v = tg.variant
		}
		used[v] = true
	}
	for name := range brokenBrokers {
		if !used[name] {
			t.Errorf("broken broker %q is no case's target", name)
		}
	}
	for name := range brokenBackends {
		if !used[name] {
			t.Errorf("broken backend %q is no case's target", name)
		}
	}
	for name := range brokenPairs {
		if !used[name] {
			t.Errorf("broken pair %q is no case's target", name)
		}
	}
	// Every fault scenario has a broken setup (selftest_fault_test.go).
	for _, sc := range faultScenarios {
		n := 0
		for _, setup := range faultSetups {
			if setup.scenario == sc {
				n++
			}
		}
		if n == 0 {
			t.Errorf("fault scenario %s has no broken setup: a scenario never shown to fail is a defect", sc)
		}
	}
	for variant, setup := range faultSetups {
		if !slices.Contains(faultScenarios, setup.scenario) {
			t.Errorf("broken setup %q names an unknown fault scenario %q", variant, setup.scenario)
		}
	}
}

// target is one (case, broken variant) pair of the self-test.
type target struct{ name, variant string }

func targetsOf(ms ...map[string]string) []target {
	var out []target
	for _, m := range ms {
		for name, variant := range m {
			out = append(out, target{name, variant})
		}
	}
	return out
}

func caseNames[H any](cs []kase[H]) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}

func find[H any](cs []kase[H], name string) func(testing.TB, H) {
	for _, c := range cs {
		if c.name == name {
			return c.run
		}
	}
	return nil
}

// expectFailure runs the case against the broken variant (must fail) and
// against the healthy drivers (must pass), so the failure is the variant's.
func expectFailure(t *testing.T, variant string, broken, healthy func(testing.TB)) {
	t.Helper()
	if m := runMock(t, broken); !m.Failed() {
		t.Errorf("case passed against the broken variant %q: it cannot catch that bug", variant)
	} else {
		t.Logf("fails as it must against %q: %s", variant, firstLine(m.msgs))
	}
	if m := runMock(t, healthy); m.Failed() {
		t.Errorf("case fails against the healthy memory drivers: %s", strings.Join(m.msgs, "; "))
	}
}

func firstLine(msgs []string) string {
	if len(msgs) == 0 {
		return ""
	}
	return strings.SplitN(msgs[0], "\n", 2)[0]
}

func TestKitCatchesBrokenBrokers(t *testing.T) {
	for _, tg := range append(targetsOf(brokerTargets, moreBrokerTargets), extraBrokerTargets...) {
		name, variant := tg.name, tg.variant
		t.Run(name+"/"+variant, func(t *testing.T) {
			t.Parallel()
			run := find(brokerCases, name)
			broken, healthy := brokenBrokers[variant], healthyBroker()
			broken.Timing, healthy.Timing = broken.Timing.withDefaults(), healthy.Timing.withDefaults()
			expectFailure(t, variant, func(t testing.TB) { run(t, broken) }, func(t testing.TB) { run(t, healthy) })
		})
	}
}

func TestKitCatchesBrokenBackends(t *testing.T) {
	for _, tg := range append(targetsOf(backendTargets, moreBackendTargets), extraBackendTargets...) {
		name, variant := tg.name, tg.variant
		t.Run(name+"/"+variant, func(t *testing.T) {
			t.Parallel()
			run := find(backendCases, name)
			broken, healthy := brokenBackends[variant], healthyBackend()
			for _, h := range []*BackendHarness{&broken, &healthy} {
				h.Timing = h.Timing.withDefaults()
			}
			expectFailure(t, variant, func(t testing.TB) { run(t, broken) }, func(t testing.TB) { run(t, healthy) })
		})
	}
}

func TestKitCatchesBrokenDriversEndToEnd(t *testing.T) {
	for _, tg := range append(targetsOf(workerTargets), extraWorkerTargets...) {
		name, target := tg.name, tg.variant
		t.Run(name+"/"+target, func(t *testing.T) {
			t.Parallel()
			run := find(workerCases, name)
			healthy := workerPair{healthyBroker(), healthyBackend()}
			broken := healthy
			kind, variant, _ := strings.Cut(target, ":")
			switch kind {
			case "broker":
				broken.broker = brokenBrokers[variant]
			case "backend":
				broken.backend = brokenBackends[variant]
			case "pair":
				healthy, broken = carrierPair(nil), brokenPairs[variant]
			default:
				t.Fatalf("worker target %q names no broker, backend or pair", target)
			}
			for _, p := range []*workerPair{&broken, &healthy} {
				p.broker.Timing = p.broker.Timing.withDefaults()
				p.backend.Timing = p.backend.Timing.withDefaults()
			}
			expectFailure(t, target, func(t testing.TB) { run(t, broken) }, func(t testing.TB) { run(t, healthy) })
		})
	}
}

// TestKitCatchesShutdownHeldBySilentServer: RunShutdownSilentServer fails
// on a broker whose Release ignores its ctx (as a driver stuck on a silent
// server would), and passes on the healthy memory broker.
func TestKitCatchesShutdownHeldBySilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tm := Timing{Lease: 300 * time.Millisecond, Watchdog: 30 * time.Second}.withDefaults()
	harness := func(stuck bool) SilentServerHarness {
		shared := memorybroker.New(nil) // both workers' brokers: one queue store
		t.Cleanup(func() { shared.Close() })
		return SilentServerHarness{Target: ln.Addr().String(), Timing: tm, Broker: func(t testing.TB, _ string) errand.Broker {
			b := &brokenBroker{Broker: shared}
			if stuck {
				b.release = func(b *brokenBroker, _ context.Context, d *driver.Delivery, nb time.Time) error {
					time.Sleep(ShutdownDeadline) // a call that ignores its ctx
					return b.Broker.Release(context.Background(), d, nb)
				}
			}
			return b
		}}
	}
	if m := runMock(t, func(mt testing.TB) { shutdownSilent(mt, harness(false), tm) }); m.Failed() {
		t.Fatalf("Shutdown/SilentServer fails on the healthy memory broker: %v", m.msgs)
	}
	if m := runMock(t, func(mt testing.TB) { shutdownSilent(mt, harness(true), tm) }); !m.Failed() {
		t.Fatalf("Shutdown/SilentServer passed on a broker whose Release ignores its ctx; the case cannot fail")
	}
}

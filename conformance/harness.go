package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// BrokerHarness tells the kit how to make and judge a broker. It is a struct
// of fields so that new fields never break an existing harness.
type BrokerHarness struct {
	// New returns a fresh broker for one case; register its teardown with
	// t.Cleanup. Every case uses queue names of its own, prefixed with a
	// per-run ID, so a shared server needs no flushing between cases.
	New func(t testing.TB) errand.Broker
	// Caps declares what the broker promises; checked against what it
	// implements (Broker/Capabilities).
	Caps BrokerCaps
	// Timing tunes the waits of the broker cases. Zero fields take defaults.
	Timing Timing
	// Serial runs every case one after another. By default independent
	// cases run in parallel (t.Parallel, bounded by go test -parallel);
	// cases that assert how late something may be always run alone, first.
	Serial bool
	// PushRaw, if set, puts raw on queue the way a program other than
	// errand would, bypassing errand's own encoding: Redis, an LPUSH of the
	// bytes onto the queue's pending list; SQS, a SendMessage with the SDK
	// and no errand attributes; memory, a Publish whose body is the bytes.
	// It reports false, pushing nothing, for a payload the service itself
	// refuses (SQS: an empty body). Worker/BadMessage/ForeignBytes pushes
	// foreign bytes this way and requires that none vanishes; without
	// PushRaw that case logs that the driver has no raw path and checks
	// nothing else.
	PushRaw func(t testing.TB, b errand.Broker, queue string, raw []byte) bool
	// BeginTx, required when Caps.Tx is declared, opens a transaction of
	// the caller's own that b (a broker New made) can write inside — for
	// the PostgreSQL drivers a pgx.Tx on b's database, for the memory
	// drivers a *memorybroker.Tx — and returns it with its Commit and
	// Rollback. The Worker/Tx cases send inside it (errand.WithTx) and end
	// it with one of the two.
	BeginTx func(t testing.TB, b errand.Broker) (tx any, commit, rollback func() error)
}

// BrokerCaps are a broker's declared capabilities.
type BrokerCaps struct {
	// MaxPayload is the largest body the broker accepts (0: no limit). Must
	// equal Limits().MaxPayload when the broker is a driver.Limiter.
	MaxPayload int
	// MaxDelay is the service's native maximum delay (0: none). Must equal
	// Limits().MaxDelay. The kit sends a delay of 1.5×MaxDelay and checks it
	// is still honoured, so a harness configures a short hop (SQS: seconds,
	// not 15 minutes).
	MaxDelay time.Duration
	// OrderedByETA: due messages are delivered in ETA order.
	OrderedByETA bool
	// Priority: due messages of a queue are delivered highest
	// Message.Priority first, in publish order within a priority (checked
	// by Priority/Order).
	Priority bool
	// DetectsLostLease: settling a delivery whose lease ran out and whose
	// message another consumer now holds returns driver.ErrLeaseLost. SQS
	// cannot tell (a stale receipt handle's delete succeeds); the kit then
	// checks only that nothing is lost.
	DetectsLostLease bool
	// Durable: messages survive a restart of the broker's server, queued
	// and in flight alike. Checked by RunServerRestart: a broker restarted
	// there must declare it, and then nothing may be lost.
	Durable bool
	// Optional capabilities; each must match the optional interface the broker
	// implements, both ways.
	Purge     bool // driver.Purger
	Stats     bool // driver.StatsReporter
	Archive   bool // driver.Archiver (Reject keeps a message in the archive too)
	List      bool // driver.Lister
	Queues    bool // driver.QueueLister
	Pause     bool // driver.Pauser
	Heartbeat bool // driver.Heartbeater
	Find      bool // driver.Finder
	Unique    bool // driver.Uniquer
	RateLimit bool // driver.RateLimiter
	Schedules bool // driver.ScheduleStore
	// Colocate: the broker co-locates with result backends whose location
	// it understands (driver.Colocator): it sends, starts and settles in
	// one step with them. Checked by the Worker/Colocation cases with the
	// backend of the RunWorker pair; a pair that is not co-located
	// (Colocate answers nil) is logged and checked no further.
	Colocate bool // driver.Colocator
	// Tx: the broker writes inside a caller's transaction
	// (driver.Transactor), which BeginTx opens. Checked by the Worker/Tx
	// cases with the backend of the RunWorker pair.
	Tx bool // driver.Transactor
	// CancelNotify: the broker tells every listener of its server that
	// tasks were cancelled (driver.CancelNotifier). Checked by
	// Broker/CancelNotify, and by Worker/Cancel/Running, which then gives
	// the worker so long an ExtendEvery that only the notice can cancel
	// the running task in time.
	CancelNotify bool // driver.CancelNotifier
}

// BackendHarness tells the kit how to make and judge a backend.
type BackendHarness struct {
	// New returns a fresh backend for one case whose results expire after
	// resultExpiry (0: the driver's default). Register teardown with
	// t.Cleanup. IDs are unique per run, so a shared server needs no flushing.
	New func(t testing.TB, resultExpiry time.Duration) errand.Backend
	// Caps declares what the backend promises.
	Caps BackendCaps
	// Timing tunes the waits of the backend cases.
	Timing Timing
	// Serial runs every case one after another (see BrokerHarness.Serial).
	Serial bool
}

// BackendCaps are a backend's declared capabilities.
type BackendCaps struct {
	// Expiry: results expire after the resultExpiry given to New (checked by
	// Backend/State/Expiry). A backend that cannot expire results declares
	// false, and the case then checks that it does not claim driver.Expirer.
	Expiry bool
	// MinExpiry is the shortest expiry the backend honours (memcached and
	// Redis count whole seconds). Default: 100ms.
	MinExpiry time.Duration
	// Lossy: the store may lose entries, evicted under memory pressure or
	// gone with a server restart (memcached). The kit runs every case, and
	// RunServerRestart checks what a lossy backend still promises: a waiter
	// on a lost result or chord gets an error, never a hang or a wrong value.
	Lossy bool
	// Durable: states and group metadata survive a restart of the backend's
	// server. Checked by RunServerRestart: every result and the chord
	// callback arrive as if nothing happened. Excludes Lossy.
	Durable bool
	// Waiter: the backend implements driver.StateWaiter.
	Waiter bool
	// Start: the backend implements driver.Starter (checked by the
	// Backend/Start cases, row by row of its table).
	Start bool
	// PendingIfAbsent: the backend implements driver.PendingWriter
	// (checked by Backend/State/PendingIfAbsent).
	PendingIfAbsent bool
	// Located: the backend declares its location (driver.Located), for
	// brokers that co-locate with it (the Worker/Colocation cases).
	Located bool
	// Tx: the backend writes states and groups inside a caller's
	// transaction (driver.Transactor), checked by the Worker/Tx cases
	// where it accepts the transaction the RunWorker pair's broker
	// harness opens.
	Tx bool
	// Cancel: the backend records a cancel atomically and keeps it
	// (driver.Canceller): checked by the Backend/Cancel cases, and by
	// Worker/Colocation/Settle where the pair is co-located.
	Cancel bool
}

// Timing tunes the kit's waits. Every duration is multiplied by
// ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1) for slow machines.
type Timing struct {
	// Lease is the short lease of redelivery cases. Default: 300ms.
	Lease time.Duration
	// Delay is the delay of delay cases. Default: 300ms.
	Delay time.Duration
	// DelayBound is how late a delayed message may be. Default: 250ms.
	DelayBound time.Duration
	// Prompt bounds how long a cancelled call may take to return.
	// Default: 1s.
	Prompt time.Duration
	// Watchdog bounds one case; a case still running after it fails the
	// test binary with the case's name instead of hanging. Default: 60s.
	Watchdog time.Duration
}

func (tm Timing) withDefaults() Timing {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
		*d = time.Duration(float64(*d) * scale())
	}
	def(&tm.Lease, 300*time.Millisecond)
	def(&tm.Delay, 300*time.Millisecond)
	def(&tm.DelayBound, 250*time.Millisecond)
	def(&tm.Prompt, time.Second)
	def(&tm.Watchdog, 60*time.Second)
	return tm
}

func (tm Timing) String() string {
	return fmt.Sprintf("timing: lease %v, delay %v, delay bound %v, prompt %v, scale %g", tm.Lease, tm.Delay, tm.DelayBound, tm.Prompt, scale())
}

// ScaleEnv is the environment variable that multiplies every wait.
const ScaleEnv = "ERRAND_CONFORMANCE_TIMEOUT_SCALE"

func scale() float64 {
	if v := os.Getenv(ScaleEnv); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return f
		}
	}
	return 1
}

// runID tags every queue, task and group a run creates.
var runID = func() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var seq atomic.Int64

// name returns a unique, run-tagged identifier for t's case.
func name(t testing.TB, what string) string {
	n := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("errand-conf-%s-%s-%s-%d", runID, n, what, seq.Add(1))
}

// guard runs fn under a watchdog: if fn has not returned after limit, the
// process panics naming the case (a hung case must not hang the binary
// silently until go test's own timeout).
func guard(t testing.TB, limit time.Duration, fn func()) {
	t.Helper()
	tname := t.Name()
	timer := time.AfterFunc(limit, func() {
		panic(fmt.Sprintf("conformance: case %s still running after its watchdog of %v: a blocking call ignores its ctx or never returns", tname, limit))
	})
	defer timer.Stop()
	fn()
}

// caseCtx returns a ctx ending a little before the watchdog.
func caseCtx(t testing.TB, tm Timing) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), tm.Watchdog*9/10)
	t.Cleanup(cancel)
	return ctx
}

// sleepUntil waits for the clock to reach at (time passing is the event).
func sleepUntil(ctx context.Context, at time.Time) error {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkCapability reports a mismatch between a declared capability and the
// optional interface v implements.
func checkCapability(t testing.TB, v any, declared bool, iface reflect.Type, capName string) {
	t.Helper()
	has := reflect.TypeOf(v).Implements(iface)
	switch {
	case declared && !has:
		t.Errorf("capabilities promise broken: harness declares %s but %T does not implement %s", capName, v, iface)
	case !declared && has:
		t.Errorf("capabilities promise broken: %T implements %s but the harness does not declare %s (the kit would not check it)", v, iface, capName)
	}
}

// isUnsupported reports whether err says an optional capability is missing.
func isUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

// How a case runs beside others (kase.alone).
const (
	parallel = false
	alone    = true
)

type kase[H any] struct {
	name string
	run  func(t testing.TB, h H)
	// alone: the case asserts an upper bound on a latency (a delay's
	// lateness, a prompt return, a lease extended in time) that the load of
	// other cases could break on a small machine, so it never runs beside
	// them.
	alone bool
}

// runCases runs the cases as subtests. Unless serial, every case that need
// not run alone calls t.Parallel: cases are independent (each has its own
// queue, task and group IDs), and most of a network driver's time is spent
// waiting on leases and delays. Cases that must run alone run first, one
// after another; the parallel ones start when they are done (go test's
// -parallel bounds how many run at once).
func runCases[H any](t *testing.T, h H, tm Timing, serial bool, cases []kase[H]) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !serial && !c.alone {
				t.Parallel()
			}
			guard(t, tm.Watchdog, func() { c.run(t, h) })
		})
	}
}

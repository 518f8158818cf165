package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// The Worker/Tx cases (driver.Transactor, BrokerCaps.Tx and BackendCaps.Tx):
// a task, chain, group or chord sent inside a transaction of the caller's
// own (errand.WithTx, opened by BrokerHarness.BeginTx) exists if and only
// if the transaction commits.
//
//   - Tx/Commit: before the commit no consumer fetches the task (a marker
//     published after it, outside the transaction, is fetched alone) and,
//     where the backend accepts the transaction, its state is not visible;
//     after it the task is PENDING, runs exactly once, and its unique key
//     is held.
//   - Tx/Rollback: after a rollback the task is never delivered (the
//     marker is fetched alone; Stats, where the broker counts, shows the
//     queue empty), leaves no state where the backend accepts the
//     transaction, and its unique key is free.
//   - Tx/Workflows: a chain, a group and a chord sent inside one
//     transaction each: rolled back, nothing is delivered and no state or
//     chord group is left; committed, every task runs once and the chord's
//     callback once, with its members' results.
//   - Tx/Refused: a send inside a transaction the broker cannot write
//     inside (a value of the kit's own type, which no driver knows; or any
//     transaction, through a broker that is no driver.Transactor) fails
//     with errand.ErrTxUnsupported and writes nothing. This one runs on
//     every pair.
//
// Each of the first three runs twice: on the pair as errand builds it
// (co-located where the drivers are, so a send is one Colocation.Send)
// and on the portable path (the backend's driver.Located and
// driver.PendingWriter hidden, so states and messages are separate calls
// inside the transaction). A backend that does not accept the broker's
// transaction (BackendCaps.Tx false, or its CheckTx refusing it: another
// server) has its states written outside it; the cases then check the
// messages alone and log why.

// txTask is the task the Tx cases send; txMarker names their markers.
const (
	txTask   = "conformance.tx"
	txMarker = "conformance.tx-marker"
)

// kitTx is a transaction of the kit's own type: no driver can know it.
type kitTx struct{ server string }

// transactional reports whether p's broker harness declares Tx, logging
// that the case has nothing to check when it does not; it fails the case
// when the harness declares Tx without a BeginTx.
func transactional(t testing.TB, p workerPair) bool {
	t.Helper()
	if !p.broker.Caps.Tx {
		t.Logf("the broker harness does not declare Tx: nothing to check here (Broker/Capabilities checks that the broker is no driver.Transactor; Tx/Refused checks that errand refuses a send inside a transaction)")
		return false
	}
	if p.broker.BeginTx == nil {
		t.Fatalf("capabilities promise broken: the broker harness declares Tx but has no BeginTx: the kit cannot open a transaction to send in")
	}
	return true
}

// txCase is one run of a Tx case, on one path.
type txCase struct {
	*wcase
	p        workerPair
	be       errand.Backend // the backend driver
	portable bool           // the backend's Located and PendingWriter hidden
	mu       sync.Mutex
	runs     map[string]int // runs by task UUID
}

// txPaths runs f on the pair as errand builds it, then on the portable
// path, each with drivers and a server of its own.
func txPaths(t testing.TB, p workerPair, f func(c *txCase)) {
	for _, portable := range []bool{false, true} {
		f(newTxCase(t, p, portable))
	}
}

// txOnly hides every optional interface of a backend but
// driver.Transactor.
type txOnly struct {
	errand.Backend
	driver.Transactor
}

func newTxCase(t testing.TB, p workerPair, portable bool) *txCase {
	tm := p.broker.Timing
	drv := p.broker.New(t)
	be := p.backend.New(t, 0)
	held := be
	if portable {
		held = struct{ errand.Backend }{be}
		if tr, ok := be.(driver.Transactor); ok {
			held = txOnly{be, tr}
		}
	}
	w := &wcase{t: t, tm: tm, caps: p.broker.Caps, broker: drv, queue: name(t, "q"), ctx: caseCtx(t, tm), lease: tm.Lease * 3}
	// Batches of 2: a group of 3 is two publishes, which SendConcurrency
	// would put in flight at once outside a transaction, and which a send
	// inside one makes one after the other (driver.Transactor).
	srv, err := errand.NewServer(errand.Config{Broker: drv, Backend: held, DefaultQueue: w.queue, PublishBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.srv = srv
	c := &txCase{wcase: w, p: p, be: be, portable: portable, runs: map[string]int{}}
	c.register(txTask, func(ctx context.Context, s string) (string, error) {
		c.ran(ctx)
		return s + "!", nil
	})
	c.register("conformance.tx-cb", func(ctx context.Context, parts ...string) (string, error) {
		c.ran(ctx)
		return strings.Join(parts, "+"), nil
	})
	return c
}

// path names the run's path in failure messages.
func (c *txCase) path() string {
	if c.portable {
		return "on the portable path"
	}
	return "on the pair as errand builds it"
}

// ran counts a run of the task whose ctx is ctx.
func (c *txCase) ran(ctx context.Context) {
	ti, _ := errand.TaskInfoFrom(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[ti.UUID]++
}

// runCount returns how many times task id ran.
func (c *txCase) runCount(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// begin opens a transaction with the harness's BeginTx and returns the
// ctx carrying it, and whether the backend writes inside it (else it is
// logged: the case then checks the messages alone).
func (c *txCase) begin() (ctx context.Context, commit, rollback func() error, backendIn bool) {
	c.t.Helper()
	tx, commit, rollback := c.p.broker.BeginTx(c.t, c.broker)
	if tx == nil || commit == nil || rollback == nil {
		c.t.Fatalf("BeginTx returned a nil transaction, commit or rollback")
	}
	tr, ok := c.be.(driver.Transactor)
	switch {
	case !ok:
		c.t.Logf("the backend %T is no driver.Transactor: its states are written outside the transaction, and only the messages are checked", c.be)
	case tr.CheckTx(tx) != nil:
		c.t.Logf("the backend %T does not accept the broker's transaction (%v): its states are written outside it, and only the messages are checked", c.be, tr.CheckTx(tx))
	default:
		backendIn = true
	}
	return errand.WithTx(c.ctx, tx), commit, rollback, backendIn
}

// noState checks that task id has no state in the backend, read outside
// any transaction; when names the moment, promise the broken promise.
func (c *txCase) noState(id, what, when, promise string) {
	c.t.Helper()
	st, err := c.be.GetState(c.ctx, id)
	if !errors.Is(err, errand.ErrTaskNotFound) {
		c.t.Errorf("transactional send promise broken: %s, %s %s reads %s from the backend, read outside the transaction; want ErrTaskNotFound (%s) %s", when, what, id, describeState(st, err), promise, c.path())
	}
}

// pending checks that task id reads PENDING from the backend.
func (c *txCase) pending(id, what, when string) {
	c.t.Helper()
	st, err := c.be.GetState(c.ctx, id)
	if err != nil || st.State != errand.StatePending {
		c.t.Errorf("transactional send promise broken: %s, %s %s reads %s from the backend; want PENDING (a committed send is recorded as any send is) %s", when, what, id, describeState(st, err), c.path())
	}
}

// unseen publishes a marker to the case's queue outside any transaction
// and fetches the queue until the marker arrives, acking everything: no
// message of ids may come before it (or with it). Where a broker that
// declares Tx counts its queues (driver.StatsReporter) the queue must
// then be empty (the counts of other brokers may be approximate, as
// SQS's are). when names the moment, promise the broken promise.
func (c *txCase) unseen(ids []string, when, promise string) {
	c.t.Helper()
	marker := fmt.Sprintf("%s-%s-%d", runID, txMarker, seq.Add(1))
	if err := c.broker.Publish(c.ctx, errand.Message{ID: marker, Queue: c.queue, Body: []byte(`{"conformance":"marker"}`)}); err != nil {
		c.t.Fatalf("publish the marker: %v", err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt*10)
	defer cancel()
	var got []string
	for !slices.Contains(got, marker) {
		ds, err := c.broker.Fetch(ctx, c.queue, 16, time.Minute)
		if err != nil {
			c.t.Fatalf("%s: the marker published outside the transaction was not fetched within %v (%v); fetched %v", when, c.tm.Prompt*10, err, got)
		}
		for _, d := range ds {
			got = append(got, d.ID)
		}
		if err := errors.Join(c.broker.Ack(c.ctx, ds)...); err != nil {
			c.t.Fatalf("ack: %v", err)
		}
	}
	for _, id := range ids {
		if slices.Contains(got, id) {
			c.t.Fatalf("transactional send promise broken: %s, a consumer fetched task %s (%s) %s; fetched %v", when, id, promise, c.path(), got)
		}
	}
	if sr, ok := c.broker.(driver.StatsReporter); ok && c.caps.Tx {
		s, err := sr.Stats(c.ctx, c.queue)
		if err != nil {
			c.t.Fatalf("Stats: %v", err)
		}
		if s.Pending+s.Delayed+s.InFlight != 0 {
			c.t.Errorf("transactional send promise broken: %s, after the marker, queue %s holds %d pending, %d delayed, %d in flight; want none (%s) %s", when, c.queue, s.Pending, s.Delayed, s.InFlight, promise, c.path())
		}
	}
}

// queued checks, where the broker counts its queues, that the case's queue
// holds n messages due or delayed: what a committed transaction sent.
func (c *txCase) queued(n int, when string) {
	c.t.Helper()
	sr, ok := c.broker.(driver.StatsReporter)
	if !ok {
		return
	}
	s, err := sr.Stats(c.ctx, c.queue)
	if err != nil {
		c.t.Fatalf("Stats: %v", err)
	}
	if s.Pending+s.Delayed != n {
		c.t.Fatalf("transactional send promise broken: %s, queue %s holds %d pending and %d delayed messages; want the %d sent inside the transaction (a commit keeps every message of the transaction) %s", when, c.queue, s.Pending, s.Delayed, n, c.path())
	}
}

// sendTask sends a task with s as its argument inside ctx's transaction.
func (c *txCase) sendTask(ctx context.Context, s string, unique string) *errand.AsyncResult {
	c.t.Helper()
	sig := errand.NewSignature(txTask, s)
	if unique != "" {
		sig.UniqueKey, sig.UniqueFor = unique, time.Minute
	}
	r, err := c.srv.SendTask(ctx, sig)
	if err != nil {
		c.t.Fatalf("SendTask inside a transaction %s: %v", c.path(), err)
	}
	return r
}

// uniqueKey returns a unique key for the case when the broker holds them,
// else "".
func (c *txCase) uniqueKey() string {
	if !c.caps.Unique {
		return ""
	}
	return name(c.t, "key")
}

// keyHeld checks whether key is held, by a send of another task under it
// outside any transaction: held wants a *DuplicateError naming holder,
// free wants the send to succeed (its task is then left to run).
func (c *txCase) keyHeld(key, holder string, held bool, when string) {
	c.t.Helper()
	if key == "" {
		return
	}
	sig := errand.NewSignature(txTask, "probe")
	sig.UniqueKey, sig.UniqueFor = key, time.Minute
	_, err := c.srv.SendTask(c.ctx, sig)
	var dup *errand.DuplicateError
	switch {
	case held && (!errors.As(err, &dup) || dup.ID != holder):
		c.t.Errorf("transactional send promise broken: %s, a send under the unique key %q taken inside it returned %v; want a *DuplicateError naming task %s (a committed send holds its key) %s", when, key, err, holder, c.path())
	case !held && err != nil:
		c.t.Errorf("transactional send promise broken: %s, a send under the unique key %q taken inside it returned %v; want it free (a rolled-back send holds no key) %s", when, key, err, c.path())
	}
}

func txCommit(t testing.TB, p workerPair) {
	if !transactional(t, p) {
		return
	}
	txPaths(t, p, func(c *txCase) {
		ctx, commit, _, backendIn := c.begin()
		key := c.uniqueKey()
		r := c.sendTask(ctx, "a", key)
		id := r.Signature.UUID
		if backendIn {
			c.noState(id, "task", "before the commit", "nothing sent inside a transaction is visible before it commits")
		}
		c.unseen([]string{id}, "before the commit", "no consumer sees a task of a transaction not yet committed")
		if err := commit(); err != nil {
			c.t.Fatalf("commit: %v", err)
		}
		c.pending(id, "task", "after the commit")
		c.queued(1, "after the commit")
		c.keyHeld(key, id, true, "after the commit")
		c.start(errand.WorkerConfig{})
		var out string
		if err := r.GetInto(c.ctx, &out); err != nil || out != "a!" {
			c.t.Fatalf("transactional send promise broken: the task sent inside a committed transaction ended %q, %v; want a! (it runs once committed) %s", out, err, c.path())
		}
		c.onceEach("after the commit", id)
	})
}

// onceEach sends a marker task outside any transaction, waits for it to
// run, then checks that each of ids ran exactly once.
func (c *txCase) onceEach(when string, ids ...string) {
	c.t.Helper()
	if _, err := c.send(errand.NewSignature(txTask, "after")).Get(c.ctx); err != nil {
		c.t.Fatalf("a task sent after the transaction: %v", err)
	}
	for _, id := range ids {
		if n := c.runCount(id); n != 1 {
			c.t.Errorf("transactional send promise broken: %s, task %s ran %d times; want exactly once %s", when, id, n, c.path())
		}
	}
}

func txRollback(t testing.TB, p workerPair) {
	if !transactional(t, p) {
		return
	}
	txPaths(t, p, func(c *txCase) {
		ctx, _, rollback, backendIn := c.begin()
		key := c.uniqueKey()
		id := c.sendTask(ctx, "b", key).Signature.UUID
		if err := rollback(); err != nil {
			c.t.Fatalf("rollback: %v", err)
		}
		c.unseen([]string{id}, "after the rollback", "a rolled-back send leaves no message")
		if backendIn {
			c.noState(id, "task", "after the rollback", "a rolled-back send leaves no state")
		}
		c.keyHeld(key, id, false, "after the rollback")
		if n := c.runCount(id); n != 0 {
			c.t.Errorf("transactional send promise broken: task %s sent inside a rolled-back transaction ran %d times %s", id, n, c.path())
		}
	})
}

// txRefused: a send inside a transaction the broker cannot write inside
// fails with ErrTxUnsupported, and nothing is written: not the task's
// state, not its message, not its unique key.
func txRefused(t testing.TB, p workerPair) {
	c := newTxCase(t, p, false)
	refuse := func(srv *errand.Server, tx any, why string) {
		key := c.uniqueKey()
		sig := errand.NewSignature(txTask, "refused")
		if key != "" {
			sig.UniqueKey, sig.UniqueFor = key, time.Minute
		}
		ctx := errand.WithTx(c.ctx, tx)
		_, err := srv.SendTask(ctx, sig)
		if !errors.Is(err, errand.ErrTxUnsupported) {
			c.t.Errorf("transactional send promise broken: SendTask inside %s returned %v; want errand.ErrTxUnsupported", why, err)
		}
		f := newTxFlows(c.t)
		if _, err := srv.SendChain(ctx, f.chain); !errors.Is(err, errand.ErrTxUnsupported) {
			c.t.Errorf("transactional send promise broken: SendChain inside %s returned %v; want errand.ErrTxUnsupported", why, err)
		}
		if _, err := srv.SendGroup(ctx, f.group); !errors.Is(err, errand.ErrTxUnsupported) {
			c.t.Errorf("transactional send promise broken: SendGroup inside %s returned %v; want errand.ErrTxUnsupported", why, err)
		}
		if _, err := srv.SendChord(ctx, f.chord); !errors.Is(err, errand.ErrTxUnsupported) {
			c.t.Errorf("transactional send promise broken: SendChord inside %s returned %v; want errand.ErrTxUnsupported", why, err)
		}
		ids := append(f.ids(), sig.UUID)
		c.unseen(ids, "after sends inside "+why, "a refused send writes nothing")
		for _, id := range ids {
			c.noState(id, "task", "after sends inside "+why, "a refused send writes nothing")
		}
		if _, err := c.be.GroupStates(c.ctx, f.chord.Group.GroupUUID); !errors.Is(err, driver.ErrGroupNotFound) {
			c.t.Errorf("transactional send promise broken: after a SendChord inside %s, its group %s reads %v; want driver.ErrGroupNotFound (a refused send writes nothing)", why, f.chord.Group.GroupUUID, err)
		}
		c.keyHeld(key, sig.UUID, false, "after a send inside "+why)
	}
	refuse(c.srv, &kitTx{server: "the kit's"}, "a transaction of the kit's own type, which no driver knows")
	if !c.caps.Tx {
		return
	}
	// The same broker hidden behind a wrapper that is no driver.Transactor.
	plain, err := errand.NewServer(errand.Config{Broker: struct{ errand.Broker }{c.broker}, Backend: c.be, DefaultQueue: c.queue})
	if err != nil {
		t.Fatal(err)
	}
	tx, _, rollback := p.broker.BeginTx(t, c.broker)
	defer rollback()
	refuse(plain, tx, "a transaction of the broker's, sent through a broker that is no driver.Transactor")
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Worker/Colocation/Settle: a broker declaring BrokerCaps.Colocate
// (driver.Colocator) writes the final states of the RunWorker pair's
// backend in the step of an ack (Colocation.Settle), where the two are
// co-located. A backend no driver can know gets nil; a pair that is not
// co-located (nil) is logged and checked no further. Otherwise the case
// checks Settle directly and through a real Server:
//
//   - a call writes each state (readable from the backend) and acks each
//     delivery (not delivered again after its lease);
//   - a delivery whose lease was lost (its message redelivered to another
//     consumer) fails with ErrLeaseLost alone, where the broker detects
//     lost leases, its state still written, and the other consumer's
//     delivery is untouched;
//   - where the backend is a driver.Canceller (BackendCaps.Cancel), a
//     cancelled task's state is not written: its delivery is acked and
//     answers an error wrapping ErrCancelled, beside a delivery settled
//     as usual;
//   - a worker settles tasks that nothing follows through Settle, each
//     SUCCESS with no SetStates of SUCCESS and no Ack call, each run once.

// settleTask is the task the case's worker runs.
const settleTask = "conformance.settled"

// settlingBroker is the broker driver as errand sees it in the case: its
// Colocator forwarded (for the raw backend the recorder wraps) with Settle
// alone co-located (partialColocation), every other optional capability
// hidden. It counts Settle calls and their deliveries, and Ack calls, and
// records each settled state in the task's path, as the recorder does for
// SetStates.
type settlingBroker struct {
	errand.Broker
	carrier driver.Colocator
	held    errand.Backend
	raw     errand.Backend
	rec     *recorder

	mu      sync.Mutex
	calls   int // carried calls
	carried int // deliveries in them
	acks    int // Ack calls
}

func (b *settlingBroker) Colocate(be driver.Backend) driver.Colocation {
	if be == b.held {
		be = b.raw
	}
	c := b.carrier.Colocate(be)
	if c == nil {
		return nil
	}
	return &partialColocation{broker: b, held: b.held, settle: func(ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
		b.mu.Lock()
		b.calls++
		b.carried += len(ds)
		b.mu.Unlock()
		b.rec.mu.Lock()
		for _, st := range sts {
			b.rec.paths[st.TaskUUID] = append(b.rec.paths[st.TaskUUID], st.State)
		}
		b.rec.mu.Unlock()
		return c.Settle(ctx, ds, sts)
	}}
}

func (b *settlingBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	b.mu.Lock()
	b.acks++
	b.mu.Unlock()
	return b.Broker.Ack(ctx, ds)
}

func (b *settlingBroker) counts() (calls, carried, acks int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.carried, b.acks
}

func carriedSettle(t testing.TB, p workerPair) {
	if !colocated(t, p) {
		return
	}
	c := newBCase(t, p.broker)
	be := p.backend.New(t, 0)
	carrier, coloc := colocate(t, c.drv, be, "Settle", "writes SUCCESS then acks")
	if coloc == nil {
		return
	}
	carry := coloc.Settle
	settleWritesAndAcks(c, be, carry)
	settleLostLease(c, be, carry)
	if p.backend.Caps.Cancel {
		settleCancelled(c, be, carry)
	}
	settleThroughWorker(t, p, c.drv, carrier, be)
}

// successOf is the SUCCESS a worker records for task id.
func successOf(id string) *errand.TaskState {
	now := time.Now().UTC()
	return &errand.TaskState{TaskUUID: id, TaskName: settleTask, State: errand.StateSuccess, Attempt: 1, CreatedAt: now, FinishedAt: now}
}

// isSuccess checks that id reads back SUCCESS, and names what.
func isSuccess(c *bcase, be errand.Backend, id, what string) {
	c.t.Helper()
	st, err := be.GetState(c.ctx, id)
	if err != nil || st.State != errand.StateSuccess || st.TaskName != settleTask {
		c.t.Errorf("carry promise broken: %s, task %s reads %s from the backend; want SUCCESS (the carried settle writes each delivery's state)", what, id, describeState(st, err))
	}
}

// settleWritesAndAcks: one carried call of three deliveries writes their
// states and acks them: nothing comes back after their lease.
func settleWritesAndAcks(c *bcase, be errand.Backend, carry settleFunc) {
	const n = 3
	for i := range n {
		c.publish(c.msg(fmt.Sprintf("s%d", i), time.Time{}))
	}
	ds := c.fetchN(n, c.tm.Lease, c.tm.Prompt*5)
	if len(ds) != n {
		c.t.Fatalf("fetched %d of %d", len(ds), n)
	}
	sts := make([]*errand.TaskState, n)
	for i, d := range ds {
		sts[i] = successOf(d.ID)
	}
	errs, err := checkAnswer("Colocation.Settle", n, carry(c.ctx, ds, sts))
	if err != nil {
		c.t.Fatalf("batch convention promise broken: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			c.t.Errorf("carry promise broken: a carried settle answered %v for delivery %d (%s), whose lease is live; want nil", err, i, ds[i].ID)
		}
	}
	for _, d := range ds {
		isSuccess(c, be, d.ID, "after a carried settle")
	}
	if back := c.fetch(n, time.Minute, c.tm.Lease*3); len(back) != 0 {
		c.t.Errorf("carry promise broken: %v came back after a carried settle answered their acks (waited %v, lease %v); want them acked for good", ids(back), c.tm.Lease*3, c.tm.Lease)
	}
}

// settleLostLease: in a carried call, a delivery whose lease lapsed and
// whose message another consumer holds fails alone (with ErrLeaseLost
// where the broker detects lost leases), its state written all the same;
// the other delivery is settled, and the other consumer still acks the
// message it holds.
func settleLostLease(c *bcase, be errand.Backend, carry settleFunc) {
	c.publish(c.msg("lost", time.Time{}), c.msg("live", time.Time{}))
	lost := c.fetchN(1, c.tm.Lease, c.tm.Prompt*5)
	live := c.fetchN(1, time.Minute, c.tm.Prompt*5)
	if len(lost) != 1 || len(live) != 1 {
		c.t.Fatalf("fetched %d and %d of 2", len(lost), len(live))
	}
	again := c.fetchN(1, time.Minute, c.tm.Lease*3+c.tm.Prompt*5)
	if len(again) != 1 || again[0].ID != lost[0].ID {
		c.t.Fatalf("at-least-once promise broken: %s, leased for %v, was not delivered again (got %v)", lost[0].ID, c.tm.Lease, ids(again))
	}
	ds := []*driver.Delivery{lost[0], live[0]}
	errs, err := checkAnswer("Colocation.Settle", 2, carry(c.ctx, ds, []*errand.TaskState{successOf(lost[0].ID), successOf(live[0].ID)}))
	if err != nil {
		c.t.Fatalf("batch convention promise broken: %v", err)
	}
	if errs[1] != nil {
		c.t.Errorf("carry promise broken: a carried settle answered %v for %s, whose lease is live, beside a lost one; one lost lease must fail its delivery alone", errs[1], live[0].ID)
	}
	if c.h.Caps.DetectsLostLease && !errors.Is(errs[0], driver.ErrLeaseLost) {
		c.t.Errorf("carry promise broken: a carried settle answered %v for %s, whose lease was lost (another consumer holds it); want an error satisfying errors.Is(err, driver.ErrLeaseLost)", errs[0], lost[0].ID)
	}
	isSuccess(c, be, lost[0].ID, "after a carried settle of a lost lease (the state is written as SetStates before an Ack would)")
	isSuccess(c, be, live[0].ID, "after a carried settle")
	if err := ackOne(c.ctx, c.b, again[0]); err != nil && c.h.Caps.DetectsLostLease {
		c.t.Errorf("carry promise broken: the consumer holding %s could not ack it after a stale carried settle: %v; want the stale settle to leave its delivery alone", again[0].ID, err)
	}
	if back := c.fetch(2, time.Minute, c.tm.Lease*3); len(back) != 0 {
		c.t.Errorf("carry promise broken: %v came back after both were settled (waited %v)", ids(back), c.tm.Lease*3)
	}
}

// settleCancelled: in a carried call, a delivery whose task was cancelled
// while it ran answers an error wrapping ErrCancelled, its task stays
// CANCELLED and its message is acked all the same (it never comes
// back); the other delivery is settled as usual.
func settleCancelled(c *bcase, be errand.Backend, carry settleFunc) {
	cn, ok := be.(driver.Canceller)
	if !ok {
		c.t.Fatalf("capabilities promise broken: the backend harness declares Cancel but %T does not implement driver.Canceller", be)
	}
	c.publish(c.msg("cancelled", time.Time{}), c.msg("kept", time.Time{}))
	ds := c.fetchN(2, c.tm.Lease, c.tm.Prompt*5)
	if len(ds) != 2 {
		c.t.Fatalf("fetched %d of 2", len(ds))
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, d := range ds {
		if err := setOne(c.ctx, be, &errand.TaskState{TaskUUID: d.ID, TaskName: settleTask, State: errand.StateStarted, Attempt: 1, CreatedAt: now, StartedAt: now}); err != nil {
			c.t.Fatalf("SetStates(STARTED): %v", err)
		}
	}
	cancelled := ds[0]
	if res := cn.Cancel(c.ctx, []*errand.TaskState{cancelOf(cancelled.ID)}); len(res) != 1 || res[0].Err != nil || !res[0].Written {
		c.t.Fatalf("Cancel of a STARTED task answered %+v; want one result, written", res)
	}
	errs, err := checkAnswer("Colocation.Settle", 2, carry(c.ctx, ds, []*errand.TaskState{successOf(ds[0].ID), successOf(ds[1].ID)}))
	if err != nil {
		c.t.Fatalf("batch convention promise broken: %v", err)
	}
	if !errors.Is(errs[0], driver.ErrCancelled) {
		c.t.Errorf("cancel promise broken: a carried settle of a SUCCESS over a CANCELLED task answered %v; want an error satisfying errors.Is(err, driver.ErrCancelled) (driver.Colocation.Settle)", errs[0])
	}
	if errs[1] != nil {
		c.t.Errorf("carry promise broken: a carried settle answered %v for %s beside a cancelled task's delivery; want nil (a refused state fails its delivery alone)", errs[1], ds[1].ID)
	}
	if st, err := be.GetState(c.ctx, cancelled.ID); err != nil || st.State != errand.StateCancelled || st.Error != cancelError {
		c.t.Errorf("cancel promise broken: after a carried settle of SUCCESS over a CANCELLED task, it reads %s, error %q; want CANCELLED as the canceller wrote it (a cancel is never overwritten)", describeState(st, err), errorOf(st))
	}
	isSuccess(c, be, ds[1].ID, "after a carried settle beside a cancelled task")
	if back := c.fetch(2, time.Minute, c.tm.Lease*3); len(back) != 0 {
		c.t.Errorf("cancel promise broken: %v came back after a carried settle (waited %v, lease %v); want the cancelled task's delivery acked too (driver.Colocation.Settle acks it)", ids(back), c.tm.Lease*3, c.tm.Lease)
	}
}

// settleThroughWorker: a worker on a server of the pair runs 10 tasks
// that nothing follows: each ends SUCCESS, runs once, and is settled by
// carried calls, with no Ack call and no SetStates of SUCCESS.
func settleThroughWorker(t testing.TB, p workerPair, drv errand.Broker, carrier driver.Colocator, be errand.Backend) {
	const n = 10
	var sb *settlingBroker
	w, results, runs := runThroughCarrier(t, p, drv, be, settleTask, n, false, func(rec *recorder, held errand.Backend) errand.Broker {
		sb = &settlingBroker{Broker: drv, carrier: carrier, held: held, raw: be, rec: rec}
		return sb
	})
	rec, tm := w.rec, w.tm
	calls, carried, acks := sb.counts()
	if carried != n || acks != 0 {
		t.Errorf("carry promise broken: %d tasks that nothing follows were settled by %d carried calls of %d deliveries and %d Ack calls; want every one settled by Settle (Colocate answered calls), no Ack", n, calls, carried, acks)
	}
	for i, r := range results {
		id := r.Signature.UUID
		if runs[id] != 1 {
			t.Errorf("carry promise broken: task %d (%s) ran %d times; want once", i, id, runs[id])
		}
		if p := rec.path(id); slices.Contains(p, errand.StateSuccess) && slices.Index(p, errand.StateSuccess) != len(p)-1 {
			t.Errorf("states promise broken: task %s went through %v; SUCCESS must be last", id, p)
		}
	}
	if left := (&carryCase{wcase: w, drv: drv}).fetchDirect(w.queue, n, tm.Prompt/2); len(left) != 0 {
		t.Errorf("carry promise broken: after every task was settled, the queue still delivered %v; want nothing (each carried settle acks)", left)
	}
}

// runThroughCarrier runs n tasks named task (each returns its argument)
// through a worker on a server of the pair whose broker is what wrap
// makes of the recording backend (the pair's driver with its co-location
// in front), checks each result, and shuts the worker down. With many,
// the worker consumes two queues, the tasks sent to each in turn, and the
// server has 70 more tasks registered, whose names sort before task (so
// task is past the 64th name). It returns the
// case, the tasks' results in order, and how often each task UUID ran.
func runThroughCarrier(t testing.TB, p workerPair, drv errand.Broker, be errand.Backend, task string, n int, many bool, wrap func(rec *recorder, held errand.Backend) errand.Broker) (*wcase, []*errand.AsyncResult, map[string]int) {
	tm := p.broker.Timing
	rec := &recorder{Backend: be, paths: map[string][]errand.State{}}
	held := rec.backend()
	w := &wcase{t: t, tm: tm, caps: p.broker.Caps, broker: drv, rec: rec, queue: name(t, "q"), ctx: caseCtx(t, tm), lease: tm.Lease * 3}
	srv, err := errand.NewServer(errand.Config{Broker: wrap(rec, held), Backend: held, DefaultQueue: w.queue})
	if err != nil {
		t.Fatal(err)
	}
	w.srv = srv
	rec.checkPaths(t)
	var mu sync.Mutex
	runs := map[string]int{}
	w.register(task, func(ctx context.Context, i int) (int, error) {
		ti, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		runs[ti.UUID]++
		mu.Unlock()
		return i, nil
	})
	// One task at a time to an idle worker: each is fetched (and, by a
	// co-located fetch, started) within moments of its send, by a clock other
	// than the producer's, the way a task created and started within one
	// millisecond shows a start cut to a coarser clock (issue 31).
	results := make([]*errand.AsyncResult, n)
	var cfg errand.WorkerConfig
	queues := []string{w.queue}
	if many {
		queues = append(queues, w.queue+"-2")
		cfg.Queues = map[string]int{queues[0]: 2, queues[1]: 1}
		for i := range 70 {
			w.register(fmt.Sprintf("conformance.a%02d", i), func(i int) (int, error) { return i, nil })
		}
	}
	wk := w.start(cfg)
	for i := range n {
		sig := errand.NewSignature(task, i)
		sig.RoutingKey = queues[i%len(queues)]
		results[i] = w.send(sig)
		var got int
		if err := results[i].GetInto(w.ctx, &got); err != nil || got != i {
			t.Fatalf("carry promise broken: task %d ended %d, %v; want %d", i, got, err, i)
		}
	}
	sctx, cancel := context.WithTimeout(w.ctx, tm.Prompt*10)
	defer cancel()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("worker shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return w, results, maps.Clone(runs)
}

// settleFunc is driver.Colocation.Settle.
type settleFunc func(ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error

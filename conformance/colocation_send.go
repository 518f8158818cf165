package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Worker/Colocation/Send: a broker declaring BrokerCaps.Colocate
// (driver.Colocator) records the PENDING states of the RunWorker pair's
// backend in the step of a publish, where the two are co-located
// (Colocation.Send). Where Colocate answers calls for the raw backend, the
// case checks Send directly and through a real Server, which errand builds
// on the same two drivers:
//
//   - a SendTask under a UUID errand made costs one Send call, no
//     Publish and no backend write, and the task is PENDING when it
//     returns;
//   - a call writes PENDING only where a task has no state, publishes its
//     messages, and reports published=true only when the broker took them
//     (a call under a cancelled ctx must not claim a publish it did not
//     make);
//   - 20 concurrent SendTasks (joined into shared calls) are each PENDING
//     and each delivered once, and a worker runs each once.

// carryTask is the task the case sends.
const carryTask = "conformance.carried"

// carryingBroker is the broker driver as errand sees it in the case: its
// Colocator forwarded with Send alone co-located (partialColocation),
// every other optional capability hidden. errand asks it to co-locate with
// the backend it holds (the recorder's wrapper), which the driver cannot
// recognise; it asks the driver for the raw backend the wrapper stands
// for instead. It counts carried calls, their messages,
// Publish calls and deliveries by message ID, and records each carried
// state as PENDING first in the task's path, as the recorder does for
// SetPendingIfAbsent.
type carryingBroker struct {
	errand.Broker
	carrier driver.Colocator
	held    errand.Backend // the backend errand holds
	raw     errand.Backend // the driver it wraps
	rec     *recorder

	mu        sync.Mutex
	calls     int // carried calls
	carried   int // messages in them
	publishes int // Publish calls
	delivered map[string]int
}

func (b *carryingBroker) Colocate(be driver.Backend) driver.Colocation {
	if be == b.held {
		be = b.raw
	}
	c := b.carrier.Colocate(be)
	if c == nil {
		return nil
	}
	return &partialColocation{broker: b, held: b.held, send: func(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
		b.mu.Lock()
		b.calls++
		b.carried += len(msgs)
		b.mu.Unlock()
		b.rec.mu.Lock()
		b.rec.recordPending(sts)
		b.rec.mu.Unlock()
		return c.Send(ctx, sts, msgs)
	}}
}

func (b *carryingBroker) Publish(ctx context.Context, msgs ...errand.Message) error {
	b.mu.Lock()
	b.publishes++
	b.mu.Unlock()
	return b.Broker.Publish(ctx, msgs...)
}

func (b *carryingBroker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	ds, err := b.Broker.Fetch(ctx, queue, limit, lease)
	b.mu.Lock()
	for _, d := range ds {
		b.delivered[d.ID]++
	}
	b.mu.Unlock()
	return ds, err
}

// counts returns the carried calls, their messages and the Publish calls
// so far.
func (b *carryingBroker) counts() (calls, carried, publishes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.carried, b.publishes
}

func (b *carryingBroker) deliveries(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delivered[id]
}

// carryCase is one run of the case over a pair that shares a server.
type carryCase struct {
	*wcase
	drv   errand.Broker                                                                           // the broker driver, raw
	be    errand.Backend                                                                          // the backend driver, raw
	carry func(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) // the driver's Send for be
	cb    *carryingBroker                                                                         // the broker errand holds
}

func carriedPending(t testing.TB, p workerPair) {
	if !colocated(t, p) {
		return
	}
	drv := p.broker.New(t)
	be := p.backend.New(t, 0)
	carrier, coloc := colocate(t, drv, be, "Send", "writes PENDING beside the publish")
	if coloc == nil {
		return
	}
	carry := coloc.Send

	tm := p.broker.Timing
	rec := &recorder{Backend: be, paths: map[string][]errand.State{}}
	held := rec.backend()
	cb := &carryingBroker{Broker: drv, carrier: carrier, held: held, raw: be, rec: rec, delivered: map[string]int{}}
	w := &wcase{t: t, tm: tm, caps: p.broker.Caps, broker: drv, rec: rec, queue: name(t, "q"), ctx: caseCtx(t, tm), lease: tm.Lease * 3}
	srv, err := errand.NewServer(errand.Config{Broker: cb, Backend: held, DefaultQueue: w.queue})
	if err != nil {
		t.Fatal(err)
	}
	w.srv = srv
	rec.checkPaths(t)
	c := &carryCase{wcase: w, drv: drv, be: be, carry: carry, cb: cb}
	c.register(carryTask, func(ctx context.Context, i int) (int, error) { return i, nil })

	first := c.sendOne()
	c.notOverwritten()
	c.publishedMeansPublished()
	c.concurrent(first)
}

// pendingOf returns the PENDING state errand writes for a send of task id.
func pendingOf(id string) *errand.TaskState {
	return &errand.TaskState{TaskUUID: id, TaskName: carryTask, State: errand.StatePending, Attempt: 1, CreatedAt: time.Now().UTC()}
}

// isPending checks that id reads back PENDING, and names what.
func (c *carryCase) isPending(id, what string) bool {
	c.t.Helper()
	st, err := c.be.GetState(c.ctx, id)
	if err != nil || st.State != errand.StatePending || st.TaskName != carryTask {
		c.t.Errorf("carry promise broken: %s, task %s reads %s from the backend; want PENDING named %s (the carried call writes PENDING where a task has no state)", what, id, describeState(st, err), carryTask)
		return false
	}
	return true
}

func describeState(st *errand.TaskState, err error) string {
	if err != nil {
		return fmt.Sprintf("error %v", err)
	}
	if st == nil {
		return "no state"
	}
	return fmt.Sprintf("%s (task %q, attempt %d)", st.State, st.TaskName, st.Attempt)
}

// sendOne: one SendTask under a UUID errand made goes in one carried call,
// with no Publish and no backend write, and the task is PENDING when
// SendTask returns. It returns the task's result.
func (c *carryCase) sendOne() *errand.AsyncResult {
	r := c.send(errand.NewSignature(carryTask, 0))
	calls, carried, publishes := c.cb.counts()
	if calls != 1 || carried != 1 || publishes != 0 {
		c.t.Errorf("carry promise broken: one SendTask under a UUID errand made cost %d carried calls (%d messages) and %d Publish calls; want one carried call of one message and no Publish (Colocate answered calls for the backend, so PENDING rides with the publish)", calls, carried, publishes)
	}
	if w := c.rec.writeCalls(); len(w) != 0 {
		c.t.Errorf("carry promise broken: one carried SendTask also wrote to the backend itself: %v; want no backend write (the carried call records PENDING)", w)
	}
	c.isPending(r.Signature.UUID, "right after SendTask returned")
	return r
}

// directMsg is a message of the case's own, for task id on queue q.
func directMsg(id, q string) errand.Message {
	return errand.Message{ID: id, Queue: q, Body: []byte(`{"conformance":"` + id + `"}`)}
}

// fetchDirect waits up to within for the messages of q, acking each, and
// returns their IDs.
func (c *carryCase) fetchDirect(q string, n int, within time.Duration) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, within)
	defer cancel()
	var got []string
	for len(got) < n && ctx.Err() == nil {
		ds, err := c.drv.Fetch(ctx, q, n-len(got), c.lease)
		if err != nil {
			if ctx.Err() != nil && c.ctx.Err() == nil {
				break // within passed
			}
			c.t.Fatalf("Fetch(%s): %v", q, err)
		}
		for _, d := range ds {
			got = append(got, d.ID)
			if err := ackOne(c.ctx, c.drv, d); err != nil {
				c.t.Fatalf("Ack(%s): %v", d.ID, err)
			}
		}
	}
	return got
}

// notOverwritten: one carried call of PENDING for tasks that already have
// a state (PENDING of a later attempt, RECEIVED, STARTED, SUCCESS,
// FAILURE) and for one that has none, with that task's message: the
// existing states stay as they were, the new task is PENDING, and its
// message is delivered.
func (c *carryCase) notOverwritten() {
	q := name(c.t, "direct")
	existing := []errand.State{errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateSuccess, errand.StateFailure, errand.StateCancelled}
	var sts []*errand.TaskState
	for i, s := range existing {
		id := name(c.t, fmt.Sprint("had", i))
		if err := setOne(c.ctx, c.be, &errand.TaskState{TaskUUID: id, TaskName: carryTask, State: s, Attempt: 2, CreatedAt: time.Now().UTC()}); err != nil {
			c.t.Fatalf("SetStates(%s %s): %v", id, s, err)
		}
		sts = append(sts, pendingOf(id))
	}
	fresh := name(c.t, "fresh")
	sts = append(sts, pendingOf(fresh))
	published, err := c.carry(c.ctx, sts, []errand.Message{directMsg(fresh, q)})
	if err != nil || !published {
		c.t.Fatalf("carry promise broken: a carried call of %d states (%d with a state already) and one message returned published=%v, %v; want published, no error", len(sts), len(existing), published, err)
	}
	for i, s := range existing {
		id := sts[i].TaskUUID
		if st, err := c.be.GetState(c.ctx, id); err != nil || st.State != s || st.Attempt != 2 {
			c.t.Errorf("carry promise broken: a task in state %s (attempt 2) reads %s after a carried PENDING; an existing state must stay untouched (PENDING only where a task has no state: a worker may have recorded the task first)", s, describeState(st, err))
		}
	}
	c.isPending(fresh, "after a carried call")
	if got := c.fetchDirect(q, 1, c.tm.Prompt*5); !slices.Equal(got, []string{fresh}) {
		c.t.Fatalf("carry promise broken: the carried call returned published=true, but within %v its queue delivered %v; want its one message, %s (published means the broker accepted every message)", c.tm.Prompt*5, got, fresh)
	}
}

// publishedMeansPublished: a carried call under a cancelled ctx may fail,
// but must not report published=true unless its message was taken: errand
// would then count the task as sent.
func (c *carryCase) publishedMeansPublished() {
	q := name(c.t, "cancelled")
	id := name(c.t, "cancelled")
	ctx, cancel := context.WithCancel(c.ctx)
	cancel()
	published, err := c.carry(ctx, []*errand.TaskState{pendingOf(id)}, []errand.Message{directMsg(id, q)})
	switch {
	case !published && err == nil:
		c.t.Errorf("carry promise broken: a carried call under a cancelled ctx returned published=false with no error; a call that did not publish must say why")
	case !published:
		c.t.Logf("under a cancelled ctx the carried call failed unpublished, as it may: %v", err)
	default:
		if got := c.fetchDirect(q, 1, c.tm.Prompt*5); !slices.Equal(got, []string{id}) {
			c.t.Errorf("carry promise broken: a carried call under a cancelled ctx returned published=true (error %v), but within %v its queue delivered %v; want its message %s: published must mean the broker accepted every message (errand counts the task as sent and keeps its unique key)", err, c.tm.Prompt*5, got, id)
		}
		if err == nil {
			c.isPending(id, "after a carried call under a cancelled ctx that reported success")
		}
	}
}

// concurrent: 20 concurrent SendTasks, joined by errand into shared
// carried calls: each task is PENDING, with no Publish; a worker then runs
// each (and first, the one of sendOne) exactly once, each message
// delivered once, and nothing is left on the queue.
func (c *carryCase) concurrent(first *errand.AsyncResult) {
	const n = 20
	calls0, carried0, pubs0 := c.cb.counts()
	results := make([]*errand.AsyncResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = c.srv.SendTask(c.ctx, errand.NewSignature(carryTask, i+1)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatalf("carry promise broken: %d concurrent SendTasks over a co-located pair failed: %v; want every send to succeed", n, err)
	}
	calls, carried, pubs := c.cb.counts()
	calls, carried, pubs = calls-calls0, carried-carried0, pubs-pubs0
	if carried != n || pubs != 0 {
		c.t.Errorf("carry promise broken: %d concurrent SendTasks made %d carried calls of %d messages in all, and %d Publish calls; want their %d messages carried, no Publish", n, calls, carried, pubs, n)
	}
	for i, r := range results {
		c.isPending(r.Signature.UUID, fmt.Sprintf("right after concurrent SendTask %d of %d returned (%d carried calls)", i, n, calls))
	}

	runs := make(map[string]int) // by task UUID
	var mu sync.Mutex
	wk := c.start(errand.WorkerConfig{Middleware: []errand.Middleware{func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
			mu.Lock()
			runs[sig.UUID]++
			mu.Unlock()
			return next(ctx, sig)
		}
	}}})
	all := append([]*errand.AsyncResult{first}, results...)
	for i, r := range all {
		var got int
		if err := r.GetInto(c.ctx, &got); err != nil || got != i {
			c.t.Fatalf("carry promise broken: carried task %d ended %d, %v; want %d (its message was published and a worker runs it)", i, got, err, i)
		}
	}
	sctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt*10)
	defer cancel()
	if err := wk.Shutdown(sctx); err != nil {
		c.t.Fatalf("worker shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, r := range all {
		id := r.Signature.UUID
		if runs[id] != 1 || c.cb.deliveries(id) != 1 {
			c.t.Errorf("carry promise broken: carried task %d (%s) was delivered %d times and ran %d times; want once each (each message of a joined call published once)", i, id, c.cb.deliveries(id), runs[id])
		}
	}
	if left := c.fetchDirect(c.queue, n, c.tm.Prompt/2); len(left) != 0 {
		c.t.Errorf("carry promise broken: after every carried task ran, the queue still delivered %v; want nothing (each message of a joined call published once)", left)
	}
}

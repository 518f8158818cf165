package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Worker/Colocation/Start: a broker declaring BrokerCaps.Colocate
// (driver.Colocator) begins, in the step of a fetch (Colocation.FetchStart),
// the attempts of the tasks it delivers in the RunWorker pair's backend. A
// backend no driver can know gets nil; a pair that is not co-located (nil)
// is logged and checked no further. Otherwise:
//
//   - one carried fetch of ten messages, each a task in another state,
//     starts exactly those driver.Starter's table allows (no state;
//     PENDING, whose CreatedAt is kept, and with it a StartedAt no earlier
//     than that CreatedAt when a producer's clock is ahead), refuses the others (SUCCESS,
//     FAILURE, CANCELLED, a later attempt's state, another task's name, STARTED under a first
//     delivery) leaving their states untouched and answering each with its
//     previous state, and does not try a task outside the names given;
//   - a worker of a server on the pair runs 10 tasks without a Start call
//     of the backend, each run once and ending SUCCESS; and so does a
//     worker of two queues on a server with 70 more task names.

// startTask is the task the case's messages carry.
const startTask = "conformance.started"

// startingBroker is the broker driver as errand sees it in the case: its
// Colocator forwarded (for the raw backend the recorder wraps) with
// FetchStart alone co-located (partialColocation), every other optional
// capability hidden. It counts FetchStart calls and the starts they made, and
// records each written STARTED in the task's path.
type startingBroker struct {
	errand.Broker
	carrier driver.Colocator
	held    errand.Backend
	raw     errand.Backend
	rec     *recorder

	mu      sync.Mutex
	fetches int
	started int
}

func (b *startingBroker) Colocate(be driver.Backend) driver.Colocation {
	if be == b.held {
		be = b.raw
	}
	c := b.carrier.Colocate(be)
	if c == nil {
		return nil
	}
	return &partialColocation{broker: b, held: b.held, fetchStart: func(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
		ds, starts, at, err := c.FetchStart(ctx, queue, limit, lease, tasks)
		b.mu.Lock()
		b.fetches++
		b.mu.Unlock()
		b.rec.mu.Lock()
		for i, st := range starts {
			if st != nil && st.Written && i < len(ds) {
				b.started++
				b.rec.paths[ds[i].ID] = append(b.rec.paths[ds[i].ID], errand.StateReceived, errand.StateStarted)
			}
		}
		b.rec.mu.Unlock()
		return ds, starts, at, err
	}}
}

func (b *startingBroker) counts() (fetches, started int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	return b.fetches, b.started
}

func carriedStart(t testing.TB, p workerPair) {
	if !colocated(t, p) {
		return
	}
	c := newBCase(t, p.broker)
	be := p.backend.New(t, 0)
	carrier, coloc := colocate(t, c.drv, be, "FetchStart", "fetches, then starts")
	if coloc == nil {
		return
	}
	fetch := coloc.FetchStart
	carriedStartTable(c, be, fetch)
	startThroughWorker(t, p, c.drv, carrier, be)
}

// carriedStartTable: one carried fetch of ten messages, each finding its task in
// another state.
func carriedStartTable(c *bcase, be errand.Backend, fetch fetchStartFunc) {
	created := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	ahead := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond) // a producer's clock an hour ahead
	type row struct {
		what    string
		prev    *errand.TaskState // nil: none
		task    string
		written bool
		tried   bool
	}
	st := func(s errand.State, name string, attempt int) *errand.TaskState {
		return &errand.TaskState{TaskName: name, State: s, Attempt: attempt, CreatedAt: created}
	}
	rows := []row{
		{what: "no state", written: true, tried: true},
		{what: "PENDING", prev: st(errand.StatePending, startTask, 1), written: true, tried: true},
		{what: "PENDING created an hour ahead of the broker's clock", prev: &errand.TaskState{TaskName: startTask, State: errand.StatePending, Attempt: 1, CreatedAt: ahead}, written: true, tried: true},
		{what: "SUCCESS", prev: st(errand.StateSuccess, startTask, 1), tried: true},
		{what: "FAILURE", prev: st(errand.StateFailure, startTask, 1), tried: true},
		{what: "CANCELLED", prev: st(errand.StateCancelled, startTask, 0), tried: true},
		{what: "a later attempt's RETRY", prev: st(errand.StateRetry, startTask, 3), tried: true},
		{what: "another task's name", prev: st(errand.StatePending, "conformance.other", 1), tried: true},
		{what: "STARTED under a first delivery", prev: st(errand.StateStarted, startTask, 1), tried: true},
		{what: "a task outside spec.Tasks", task: "conformance.notstartable"},
	}
	byID := map[string]row{}
	var msgs []errand.Message
	for i, r := range rows {
		m := c.msg(fmt.Sprint("start", i), time.Time{})
		m.Task, m.TaskAttempt = startTask, 1
		if r.task != "" {
			m.Task = r.task
		}
		if r.prev != nil {
			r.prev.TaskUUID = m.ID
			if err := setOne(c.ctx, be, r.prev); err != nil {
				c.t.Fatalf("SetStates(%s): %v", r.what, err)
			}
		}
		byID[m.ID] = r
		msgs = append(msgs, m)
	}
	c.publish(msgs...)
	var ds []*driver.Delivery
	var starts []*driver.StartResult
	var ats []time.Time // the time of the fetch that delivered each of ds
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for len(ds) < len(rows) && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(c.ctx, deadline)
		got, s, a, err := fetch(ctx, c.q, len(rows)-len(ds), time.Minute, []string{startTask})
		cancel()
		if err != nil {
			c.t.Fatalf("carried fetch: %v", err)
		}
		if s == nil {
			s = make([]*driver.StartResult, len(got))
		}
		if len(s) != len(got) {
			c.t.Fatalf("carry promise broken: a carried fetch answered %d starts for %d deliveries; want one (or nil) each", len(s), len(got))
		}
		ds, starts = append(ds, got...), append(starts, s...)
		for range got {
			ats = append(ats, a)
		}
	}
	if len(ds) != len(rows) {
		c.t.Fatalf("carried fetch delivered %d of %d messages within %v", len(ds), len(rows), c.tm.Prompt*5)
	}
	for i, d := range ds {
		r, res, at := byID[d.ID], starts[i], ats[i]
		promise := "carry promise broken: a carried fetch of a task with " + r.what
		switch {
		case !r.tried:
			if res != nil {
				c.t.Errorf("%s answered a start %+v; want none (its name is not in spec.Tasks)", promise, *res)
			}
			if _, err := be.GetState(c.ctx, d.ID); err == nil {
				c.t.Errorf("%s wrote a state; want none", promise)
			}
			continue
		case res == nil:
			c.t.Errorf("%s answered no start; want the start decided by driver.Starter's table", promise)
			continue
		case res.Err != nil:
			c.t.Errorf("%s answered %v", promise, res.Err)
			continue
		case res.Written != r.written:
			c.t.Errorf("%s answered written=%v; want %v (driver.Starter's table)", promise, res.Written, r.written)
		case (res.Prev == nil) != (r.prev == nil) || (res.Prev != nil && (res.Prev.State != r.prev.State || res.Prev.TaskName != r.prev.TaskName)):
			c.t.Errorf("%s answered the previous state %s; want %s", promise, describeState(res.Prev, nil), describeState(r.prev, nil))
		}
		got, err := be.GetState(c.ctx, d.ID)
		switch {
		case r.written && (err != nil || got.State != errand.StateStarted || got.TaskName != startTask || got.Attempt != 1):
			c.t.Errorf("%s left %s; want STARTED (attempt 1, named %s)", promise, describeState(got, err), startTask)
		case r.written && r.prev != nil && !got.CreatedAt.Equal(r.prev.CreatedAt):
			c.t.Errorf("%s wrote STARTED created at %v; want the previous state's CreatedAt %v", promise, got.CreatedAt, r.prev.CreatedAt)
		case r.written && r.prev != nil && r.prev.CreatedAt.After(at) && !got.StartedAt.Equal(r.prev.CreatedAt):
			c.t.Errorf("%s wrote STARTED started at %v; want its CreatedAt %v, later than the fetch's time %v (a task never starts before it was created, whichever clock wrote its creation)", promise, got.StartedAt, r.prev.CreatedAt, at)
		case r.written && (r.prev == nil || !r.prev.CreatedAt.After(at)) && (at.IsZero() || !got.StartedAt.Equal(at)):
			c.t.Errorf("%s wrote STARTED started at %v; want the fetch's time %v (the time the carried fetch answered)", promise, got.StartedAt, at)
		case !r.written && (err != nil || got.State != r.prev.State || got.Attempt != r.prev.Attempt || got.TaskName != r.prev.TaskName):
			c.t.Errorf("%s changed it to %s; want it untouched", promise, describeState(got, err))
		}
	}
	for _, d := range ds {
		ackOne(c.ctx, c.b, d)
	}
}

// startThroughWorker: a worker of a server on the pair runs 10 tasks, each
// once, with their attempts started by its fetches, never by a Start call;
// then a worker of two queues does the same on a server with 70 more task
// names registered, sorting before the task's.
func startThroughWorker(t testing.TB, p workerPair, drv errand.Broker, carrier driver.Colocator, be errand.Backend) {
	startThroughWorkerOf(t, p, drv, carrier, be, false)
	startThroughWorkerOf(t, p, drv, carrier, be, true)
}

func startThroughWorkerOf(t testing.TB, p workerPair, drv errand.Broker, carrier driver.Colocator, be errand.Backend, many bool) {
	const n = 10
	var sb *startingBroker
	w, results, runs := runThroughCarrier(t, p, drv, be, startTask, n, many, func(rec *recorder, held errand.Backend) errand.Broker {
		sb = &startingBroker{Broker: drv, carrier: carrier, held: held, raw: be, rec: rec}
		return sb
	})
	rec := w.rec
	fetches, started := sb.counts()
	if starts := rec.writeCalls()["Start"]; started != n || starts != 0 {
		what := "a worker of one queue"
		if many {
			what = "a worker of two queues, the task's name past the 64th registered"
		}
		t.Errorf("co-location promise broken: on %s, %d tasks were started by %d FetchStart calls (%d starts) and %d Start calls of the backend; want every one started by the fetches (Colocate answered calls), no Start call", what, n, fetches, started, starts)
	}
	for i, r := range results {
		if id := r.Signature.UUID; runs[id] != 1 {
			t.Errorf("carry promise broken: task %d (%s) ran %d times; want once", i, id, runs[id])
		}
	}
}

// fetchStartFunc is driver.Colocation.FetchStart.
type fetchStartFunc func(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error)

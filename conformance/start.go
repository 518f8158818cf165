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

// Backend cases for driver.Starter (beginning an attempt in one call) and
// driver.PendingWriter (PENDING only where a task has no state). A backend
// without the capability passes them untested: errand takes its two-call
// path instead (Capabilities checks the declaration both ways).

// startRow is one row of driver.Starter's table.
type startRow struct {
	what    string
	prev    *errand.TaskState // nil: no state
	name    string            // the request's task name
	attempt int
	first   bool // FirstDelivery
	writes  bool
}

const startName = "conformance.start"

func startRows() []startRow {
	st := func(s errand.State, name string, attempt int) *errand.TaskState {
		return &errand.TaskState{TaskName: name, State: s, Attempt: attempt}
	}
	return []startRow{
		{"no state", nil, startName, 1, true, true},
		{"PENDING", st(errand.StatePending, startName, 1), startName, 1, true, true},
		{"PENDING without a name", st(errand.StatePending, "", 1), startName, 1, true, true},
		{"PENDING of a later attempt", st(errand.StatePending, startName, 3), startName, 2, true, false},
		{"PENDING of another task", st(errand.StatePending, "other.task", 1), startName, 1, true, false},
		{"RECEIVED (redelivery)", st(errand.StateReceived, startName, 1), startName, 1, false, true},
		{"RECEIVED, first delivery", st(errand.StateReceived, startName, 1), startName, 1, true, true},
		{"STARTED, redelivery", st(errand.StateStarted, startName, 1), startName, 1, false, true},
		{"STARTED, first delivery (a second message)", st(errand.StateStarted, startName, 1), startName, 1, true, false},
		{"STARTED of an earlier attempt, first delivery", st(errand.StateStarted, startName, 1), startName, 2, true, false},
		{"STARTED of an earlier attempt, redelivery", st(errand.StateStarted, startName, 1), startName, 2, false, true},
		{"STARTED of a later attempt", st(errand.StateStarted, startName, 3), startName, 2, false, false},
		{"RETRY (the retry's first delivery)", st(errand.StateRetry, startName, 2), startName, 2, true, true},
		{"RETRY of a later attempt", st(errand.StateRetry, startName, 3), startName, 2, true, false},
		{"SUCCESS", st(errand.StateSuccess, startName, 1), startName, 1, false, false},
		{"FAILURE", st(errand.StateFailure, startName, 1), startName, 1, false, false},
		{"CANCELLED", st(errand.StateCancelled, startName, 1), startName, 1, false, false},
		{"CANCELLED, first delivery", st(errand.StateCancelled, startName, 1), startName, 1, true, false},
		{"CANCELLED before it was received", st(errand.StateCancelled, startName, 0), startName, 1, true, false},
		{"SUCCESS of an earlier attempt", st(errand.StateSuccess, startName, 1), startName, 2, true, false},
		{"RECEIVED of another task", st(errand.StateReceived, "other.task", 1), startName, 1, false, false},
	}
}

// startRequest returns the request of row for task id, its states created
// at created.
func startRequest(id string, r startRow, created time.Time) driver.StartRequest {
	rec := &errand.TaskState{TaskUUID: id, TaskName: r.name, State: errand.StateReceived, Attempt: r.attempt, CreatedAt: created}
	started := rec.Copy()
	started.State, started.StartedAt = errand.StateStarted, created.Add(time.Millisecond)
	return driver.StartRequest{Received: rec, Started: started, FirstDelivery: r.first}
}

// checkStart checks one result and the state it left behind.
func (c *becase) checkStart(id string, r startRow, req driver.StartRequest, res driver.StartResult) {
	c.t.Helper()
	if res.Written != r.writes {
		c.t.Errorf("start promise broken: %s (request: attempt %d, first delivery %v): written = %v, want %v (driver.Starter's table)", r.what, r.attempt, r.first, res.Written, r.writes)
	}
	switch {
	case r.prev == nil && res.Prev != nil:
		c.t.Errorf("start promise broken: %s: Prev = %+v, want nil (the task had no state)", r.what, res.Prev)
	case r.prev != nil && (res.Prev == nil || res.Prev.State != r.prev.State || res.Prev.Attempt != r.prev.Attempt || res.Prev.TaskName != r.prev.TaskName):
		c.t.Errorf("start promise broken: %s: Prev = %+v, want the state before the call %+v (the worker decides from it)", r.what, res.Prev, r.prev)
	}
	got, err := c.b.GetState(c.ctx, id)
	switch {
	case r.writes && (err != nil || got.State != errand.StateStarted || got.Attempt != r.attempt || got.TaskName != r.name || !got.StartedAt.Equal(req.Started.StartedAt)):
		c.t.Errorf("start promise broken: %s: after a written Start the task's state is %+v, %v; want the request's STARTED", r.what, got, err)
	case r.writes && r.prev != nil && !got.CreatedAt.Equal(r.prev.CreatedAt):
		c.t.Errorf("start promise broken: %s: the written state's CreatedAt is %v, want the previous state's %v", r.what, got.CreatedAt, r.prev.CreatedAt)
	case r.writes && r.prev == nil && !got.CreatedAt.Equal(req.Started.CreatedAt):
		c.t.Errorf("start promise broken: %s: the written state's CreatedAt is %v, want the request's own %v (no previous state)", r.what, got.CreatedAt, req.Started.CreatedAt)
	case !r.writes && (err != nil || got.State != r.prev.State || got.Attempt != r.prev.Attempt || got.TaskName != r.prev.TaskName):
		c.t.Errorf("start promise broken: %s: a Start that did not write changed the state %+v into %+v, %v", r.what, r.prev, got, err)
	}
}

// seed writes r's previous state for id, created an hour ago.
func (c *becase) seed(id string, r startRow) {
	if r.prev == nil {
		return
	}
	p := r.prev.Copy()
	p.TaskUUID, p.CreatedAt = id, time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	r.prev.CreatedAt = p.CreatedAt
	c.set(p)
}

// startTable: every row of driver.Starter's table, one request a call.
func startTable(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	s, ok := c.b.(driver.Starter)
	if !ok {
		return
	}
	for i, r := range startRows() {
		id := name(t, fmt.Sprint("task", i))
		c.seed(id, r)
		req := startRequest(id, r, time.Now().UTC().Truncate(time.Millisecond))
		res := s.Start(c.ctx, []driver.StartRequest{req})
		if len(res) != 1 {
			t.Fatalf("batch convention promise broken: %d results for 1 request; Start answers exactly one per request", len(res))
		}
		if res[0].Err != nil {
			t.Fatalf("Start (%s): %v", r.what, res[0].Err)
		}
		c.checkStart(id, r, req, res[0])
	}
}

// startBatch: every row in one call, results in request order.
func startBatch(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	s, ok := c.b.(driver.Starter)
	if !ok {
		return
	}
	rows := startRows()
	ids := make([]string, len(rows))
	reqs := make([]driver.StartRequest, len(rows))
	created := time.Now().UTC().Truncate(time.Millisecond)
	for i, r := range rows {
		ids[i] = name(t, fmt.Sprint("task", i))
		c.seed(ids[i], r)
		reqs[i] = startRequest(ids[i], r, created)
	}
	res := s.Start(c.ctx, reqs)
	if len(res) != len(reqs) {
		t.Fatalf("batch convention promise broken: %d results for %d requests; want one per request, in order", len(res), len(reqs))
	}
	for i, r := range rows {
		if res[i].Err != nil {
			t.Fatalf("Start of a batch of %d: request %d (%s): %v", len(reqs), i, r.what, res[i].Err)
		}
		c.checkStart(ids[i], r, reqs[i], res[i])
	}
}

// startSameTask: one batch holding two requests of one task with no state
// (two messages of one UUID fetched together, such as a callback a
// redelivered parent published again): they are decided in request order,
// so the first writes and the second finds its STARTED and does not.
func startSameTask(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	s, ok := c.b.(driver.Starter)
	if !ok {
		return
	}
	id := name(t, "task")
	req := startRequest(id, startRow{name: startName, attempt: 1, first: true}, time.Now().UTC())
	res := s.Start(c.ctx, []driver.StartRequest{req, req})
	if len(res) != 2 {
		t.Fatalf("batch convention promise broken: %d results for 2 requests; want one per request, in order", len(res))
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("Start of a batch of 2 requests of one task: request %d: %v", i, r.Err)
		}
	}
	if !res[0].Written || res[0].Prev != nil || res[1].Written || res[1].Prev == nil || res[1].Prev.State != errand.StateStarted {
		t.Fatalf("start promise broken: a batch holding two first deliveries of one task without a state answered %+v, %+v; want the first written (no previous state) and the second not written, finding the first's STARTED (requests of one task are decided in request order)", res[0], res[1])
	}
}

// startConcurrent: racing Starts of one first delivery of a task with no
// state: the read and the write are one step, so exactly one finds no
// state and writes; every other finds it STARTED and does not.
func startConcurrent(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	s, ok := c.b.(driver.Starter)
	if !ok {
		return
	}
	const k = 16
	for round := range 4 {
		id := name(t, fmt.Sprint("task", round))
		req := startRequest(id, startRow{name: startName, attempt: 1, first: true}, time.Now().UTC())
		begin := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		written, fresh := 0, 0
		for range k {
			wg.Go(func() {
				<-begin
				res := s.Start(c.ctx, []driver.StartRequest{req})
				if len(res) != 1 || res[0].Err != nil {
					t.Errorf("Start: %d results %+v; want one, without an error", len(res), res)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if res[0].Written {
					written++
				}
				if res[0].Prev == nil {
					fresh++
				}
			})
		}
		close(begin)
		wg.Wait()
		if written != 1 || fresh != 1 {
			t.Fatalf("start promise broken: %d racing Starts of one first delivery: %d wrote and %d found no state; exactly one must (the read and the write are one atomic step)", k, written, fresh)
		}
	}
}

// startNeverBeforeCreated: a task created by a producer whose clock is an
// hour ahead of the worker's is started with StartedAt its CreatedAt, not
// the request's own earlier StartedAt: an attempt never starts before its
// task was created, in every row of the table that writes over a state.
func startNeverBeforeCreated(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	s, ok := c.b.(driver.Starter)
	if !ok {
		return
	}
	ahead := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	for i, r := range startRows() {
		if r.prev == nil || !r.writes {
			continue
		}
		id := name(t, fmt.Sprint("task", i))
		p := r.prev.Copy()
		p.TaskUUID, p.CreatedAt = id, ahead
		c.set(p)
		req := startRequest(id, r, time.Now().UTC().Truncate(time.Millisecond))
		res := s.Start(c.ctx, []driver.StartRequest{req})
		if len(res) != 1 || res[0].Err != nil || !res[0].Written {
			t.Fatalf("Start (%s, created an hour ahead): %+v; want one result, written", r.what, res)
		}
		got, err := c.b.GetState(c.ctx, id)
		switch {
		case err != nil:
			t.Fatalf("GetState after Start (%s): %v", r.what, err)
		case !got.CreatedAt.Equal(ahead) || !got.StartedAt.Equal(ahead):
			t.Errorf("start promise broken: %s created at %v (a producer's clock an hour ahead), started with StartedAt %v: the written STARTED has CreatedAt %v, StartedAt %v; want both %v (driver.Starter: StartedAt no earlier than the CreatedAt kept)",
				r.what, ahead, req.Started.StartedAt, got.CreatedAt, got.StartedAt, ahead)
		}
	}
}

// pendingIfAbsent: PENDING lands where a task has no state and leaves
// every existing state alone, within one batch.
func pendingIfAbsent(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	pw, ok := c.b.(driver.PendingWriter)
	if !ok {
		return
	}
	existing := []errand.State{errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateSuccess, errand.StateFailure, errand.StateCancelled}
	var sts []*errand.TaskState
	for i, s := range existing {
		id := name(t, fmt.Sprint("had", i))
		c.set(&errand.TaskState{TaskUUID: id, TaskName: startName, State: s, Attempt: 2, CreatedAt: time.Now()})
		sts = append(sts, &errand.TaskState{TaskUUID: id, TaskName: startName, State: errand.StatePending, Attempt: 1, CreatedAt: time.Now()})
	}
	var fresh []string
	for i := range 3 {
		id := name(t, fmt.Sprint("fresh", i))
		fresh = append(fresh, id)
		sts = append(sts, &errand.TaskState{TaskUUID: id, TaskName: startName, State: errand.StatePending, Attempt: 1, CreatedAt: time.Now()})
	}
	errs, err := checkAnswer("SetPendingIfAbsent", len(sts), pw.SetPendingIfAbsent(c.ctx, sts))
	if err != nil {
		t.Fatalf("batch convention promise broken: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("SetPendingIfAbsent: state %d (%s): %v; leaving a task that has a state is a success", i, sts[i].TaskUUID, err)
		}
	}
	for i, s := range existing {
		got, err := c.b.GetState(c.ctx, sts[i].TaskUUID)
		if err != nil || got.State != s || got.Attempt != 2 {
			t.Errorf("pending promise broken: a task in state %s (attempt 2) read back as %+v, %v after SetPendingIfAbsent; an existing state must stay untouched", s, got, err)
		}
	}
	for _, id := range fresh {
		got, err := c.b.GetState(c.ctx, id)
		if err != nil || got.State != errand.StatePending || got.TaskName != startName {
			t.Errorf("pending promise broken: a task with no state read back as %+v, %v after SetPendingIfAbsent; want PENDING", got, err)
		}
	}
}

// The worker cases' recorder keeps the wrapped backend's driver.Starter
// and driver.PendingWriter, so the kit drives the path errand takes in
// production on that backend.

type recStarter struct{ r *recorder }

// Start records RECEIVED and STARTED for each request before the call, as
// SetStates does, and takes them back where the backend did not write
// them: recorded after the call, a STARTED the case read on the server
// and cancelled before the answer came would be recorded after its
// CANCELLED.
func (s recStarter) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	s.r.mu.Lock()
	s.r.wrote("Start")
	for _, req := range reqs {
		id := req.Started.TaskUUID
		s.r.paths[id] = append(s.r.paths[id], req.Received.State, req.Started.State)
	}
	s.r.mu.Unlock()
	res := s.r.Backend.(driver.Starter).Start(ctx, reqs)
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	for i, req := range reqs {
		if i < len(res) && res[i].Err == nil && res[i].Written {
			continue
		}
		id := req.Started.TaskUUID
		s.r.takeBack(id, req.Started.State)
		s.r.takeBack(id, req.Received.State)
	}
	return res
}

type recPending struct{ r *recorder }

// SetPendingIfAbsent records PENDING first in each task's path: written,
// it came before every other state; dropped (a worker recorded the task
// first), it still stood for the send, which came before them all.
func (p recPending) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) []error {
	p.r.mu.Lock()
	p.r.wrote("SetPendingIfAbsent")
	p.r.recordPending(sts)
	p.r.mu.Unlock()
	return p.r.Backend.(driver.PendingWriter).SetPendingIfAbsent(ctx, sts)
}

// recordPending puts each state of sts (PENDING) first in its task's path;
// r.mu must be held.
func (r *recorder) recordPending(sts []*errand.TaskState) {
	for _, st := range sts {
		r.paths[st.TaskUUID] = append([]errand.State{st.State}, r.paths[st.TaskUUID]...)
	}
}

type recWaiter struct{ r *recorder }

func (w recWaiter) WaitState(ctx context.Context, id string, done func(*errand.TaskState) bool) (*errand.TaskState, error) {
	return w.r.Backend.(driver.StateWaiter).WaitState(ctx, id, done)
}

// backend returns r as an errand.Backend with the optional capabilities of
// the backend it wraps (one struct type per combination: a capability is
// a method set, found by a type assertion).
func (r *recorder) backend() errand.Backend {
	_, w := r.Backend.(driver.StateWaiter)
	_, s := r.Backend.(driver.Starter)
	_, p := r.Backend.(driver.PendingWriter)
	_, c := r.Backend.(driver.Canceller)
	W, S, P, C := recWaiter{r}, recStarter{r}, recPending{r}, recCanceller{r}
	switch {
	case w && s && p && c:
		return struct {
			*recorder
			recWaiter
			recStarter
			recPending
			recCanceller
		}{r, W, S, P, C}
	case w && s && p:
		return struct {
			*recorder
			recWaiter
			recStarter
			recPending
		}{r, W, S, P}
	case w && s && c:
		return struct {
			*recorder
			recWaiter
			recStarter
			recCanceller
		}{r, W, S, C}
	case w && p && c:
		return struct {
			*recorder
			recWaiter
			recPending
			recCanceller
		}{r, W, P, C}
	case s && p && c:
		return struct {
			*recorder
			recStarter
			recPending
			recCanceller
		}{r, S, P, C}
	case w && s:
		return struct {
			*recorder
			recWaiter
			recStarter
		}{r, W, S}
	case w && p:
		return struct {
			*recorder
			recWaiter
			recPending
		}{r, W, P}
	case w && c:
		return struct {
			*recorder
			recWaiter
			recCanceller
		}{r, W, C}
	case s && p:
		return struct {
			*recorder
			recStarter
			recPending
		}{r, S, P}
	case s && c:
		return struct {
			*recorder
			recStarter
			recCanceller
		}{r, S, C}
	case p && c:
		return struct {
			*recorder
			recPending
			recCanceller
		}{r, P, C}
	case w:
		return struct {
			*recorder
			recWaiter
		}{r, W}
	case s:
		return struct {
			*recorder
			recStarter
		}{r, S}
	case p:
		return struct {
			*recorder
			recPending
		}{r, P}
	case c:
		return struct {
			*recorder
			recCanceller
		}{r, C}
	}
	return r
}

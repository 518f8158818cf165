package postgresbackend_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	postgresbackend "github.com/errand-go/errand/backends/postgres"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// Cancel (driver.Canceller) writes CANCELLED over each live unfinished
// state in one statement, keeping the task's name, attempt, creation,
// start and progress, with a FinishedAt no earlier than its CreatedAt
// even when the canceller's clock is behind; it leaves unknown and
// finished tasks alone and says so per task. Afterwards SetStates writes
// nothing over it but a PENDING (per task: ErrCancelled, the batch's
// other states written) and Start refuses it.
func TestCancel(t *testing.T) {
	ctx := context.Background()
	b := harness(t, pgdbtest.Pool(t), nil).New(t, time.Hour).(*postgresbackend.Backend)
	created := time.Now().UTC().Truncate(time.Microsecond)
	progress := json.RawMessage(`{ "step": 3,  "of": [10] }`)
	if err := errors.Join(b.SetStates(ctx, []*driver.TaskState{
		{TaskUUID: "queued", TaskName: "q", State: driver.StatePending, CreatedAt: created},
		{TaskUUID: "running", TaskName: "r", State: driver.StateStarted, Attempt: 2, CreatedAt: created,
			StartedAt: created.Add(time.Second), Progress: progress},
		{TaskUUID: "done", TaskName: "d", State: driver.StateSuccess, CreatedAt: created, FinishedAt: created},
	})...); err != nil {
		t.Fatal(err)
	}

	// The canceller's clock is a minute behind: FinishedAt still follows
	// the task's CreatedAt and StartedAt.
	behind := created.Add(-time.Minute)
	cancelOf := func(id string) *driver.TaskState {
		return &driver.TaskState{TaskUUID: id, State: driver.StateCancelled, Error: "errand: task cancelled",
			ErrorKind: "cancelled", CreatedAt: behind, FinishedAt: behind}
	}
	res := b.Cancel(ctx, []*driver.TaskState{cancelOf("running"), cancelOf("queued"), cancelOf("done"), cancelOf("unknown")})
	if len(res) != 4 {
		t.Fatalf("Cancel of 4 tasks answered %d results", len(res))
	}
	for i, want := range []struct {
		written bool
		prev    driver.State // "": none
	}{{true, driver.StateStarted}, {true, driver.StatePending}, {false, driver.StateSuccess}, {false, ""}} {
		r := res[i]
		var prev driver.State
		if r.Prev != nil {
			prev = r.Prev.State
		}
		if r.Err != nil || r.Written != want.written || prev != want.prev {
			t.Errorf("Cancel result %d = {Written: %v, Prev: %s, Err: %v}; want Written %v, Prev %q (driver.Canceller: one answer per state, in order)",
				i, r.Written, prev, r.Err, want.written, want.prev)
		}
	}
	if p := res[0].Prev; p == nil || string(p.Progress) != string(progress) || p.Attempt != 2 {
		t.Errorf("Cancel's Prev of the running task = %+v; want its STARTED state, attempt 2, progress %s", p, progress)
	}

	for _, c := range []struct {
		id, name string
		attempt  int
		started  time.Time
		progress json.RawMessage
	}{{"running", "r", 2, created.Add(time.Second), progress}, {"queued", "q", 0, time.Time{}, nil}} {
		st, err := b.GetState(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != driver.StateCancelled || st.TaskName != c.name || st.Attempt != c.attempt || !st.CreatedAt.Equal(created) ||
			!st.StartedAt.Equal(c.started) || st.Error != "errand: task cancelled" || st.ErrorKind != "cancelled" ||
			string(st.Progress) != string(c.progress) {
			t.Errorf("state of %s after Cancel = %+v; want CANCELLED keeping name %q, attempt %d, CreatedAt %v, StartedAt %v, progress %s, with the canceller's error",
				c.id, st, c.name, c.attempt, created, c.started, c.progress)
		}
		if st.FinishedAt.Before(st.CreatedAt) || st.FinishedAt.Before(st.StartedAt) {
			t.Errorf("state of %s after Cancel: FinishedAt %v before CreatedAt %v or StartedAt %v (driver.Canceller: never before CreatedAt)",
				c.id, st.FinishedAt, st.CreatedAt, st.StartedAt)
		}
	}
	if st, err := b.GetState(ctx, "done"); err != nil || st.State != driver.StateSuccess {
		t.Errorf("a finished task after Cancel: %+v, %v; want its SUCCESS untouched", st, err)
	}
	if _, err := b.GetState(ctx, "unknown"); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Errorf("an unknown task after Cancel: %v; want ErrTaskNotFound (Cancel writes nothing for it)", err)
	}

	// Sticky: a worker's late writes are refused per task; the others in
	// the batch land.
	errs := b.SetStates(ctx, []*driver.TaskState{
		{TaskUUID: "running", TaskName: "r", State: driver.StateSuccess, Attempt: 2, CreatedAt: created, FinishedAt: created},
		{TaskUUID: "other", TaskName: "o", State: driver.StateStarted, CreatedAt: created},
		{TaskUUID: "queued", TaskName: "q", State: driver.StateStarted, Attempt: 1, CreatedAt: created, Progress: json.RawMessage(`1`)},
	})
	if len(errs) != 3 || !errors.Is(errs[0], driver.ErrCancelled) || errs[1] != nil || !errors.Is(errs[2], driver.ErrCancelled) {
		t.Fatalf("SetStates over two CANCELLED tasks and a fresh one = %v; want [ErrCancelled, nil, ErrCancelled] (driver.Canceller)", errs)
	}
	for _, id := range []string{"running", "queued"} {
		if st, _ := b.GetState(ctx, id); st == nil || st.State != driver.StateCancelled {
			t.Errorf("state of %s after a refused write = %+v; want CANCELLED kept", id, st)
		}
	}
	if st, _ := b.GetState(ctx, "other"); st == nil || st.State != driver.StateStarted {
		t.Errorf("the batch's other state: %+v; want STARTED written", st)
	}

	// Start refuses a CANCELLED task (terminal) and answers it as Prev.
	started := &driver.TaskState{TaskUUID: "queued", TaskName: "q", State: driver.StateStarted, Attempt: 1, CreatedAt: created, StartedAt: created}
	received := *started
	received.State = driver.StateReceived
	sr := b.Start(ctx, []driver.StartRequest{{Received: &received, Started: started, FirstDelivery: true}})
	if sr[0].Err != nil || sr[0].Written || sr[0].Prev == nil || sr[0].Prev.State != driver.StateCancelled {
		t.Errorf("Start of a CANCELLED task = %+v; want not written, Prev CANCELLED", sr[0])
	}

	// A second cancel changes nothing; a PENDING (the task sent again
	// under its UUID) replaces the CANCELLED.
	if r := b.Cancel(ctx, []*driver.TaskState{cancelOf("queued")}); r[0].Err != nil || r[0].Written || r[0].Prev == nil || r[0].Prev.State != driver.StateCancelled {
		t.Errorf("Cancel of a CANCELLED task = %+v; want not written, Prev CANCELLED", r[0])
	}
	if err := errors.Join(b.SetStates(ctx, []*driver.TaskState{{TaskUUID: "queued", TaskName: "q", State: driver.StatePending, CreatedAt: created}})...); err != nil {
		t.Fatalf("PENDING over CANCELLED: %v; want written (driver.Canceller: a PENDING may replace it)", err)
	}
	if st, _ := b.GetState(ctx, "queued"); st == nil || st.State != driver.StatePending {
		t.Errorf("state after PENDING over CANCELLED = %+v; want PENDING", st)
	}
}

// An expired CANCELLED counts as none: Cancel answers no state, and any
// write replaces it.
func TestCancelExpired(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	b := harness(t, pool, nil).New(t, time.Hour).(*postgresbackend.Backend)
	set(t, b, "x", driver.StateStarted)
	if r := b.Cancel(ctx, []*driver.TaskState{{TaskUUID: "x", State: driver.StateCancelled, FinishedAt: time.Now()}}); r[0].Err != nil || !r[0].Written {
		t.Fatalf("Cancel = %+v; want written", r[0])
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgdb.Table(locSchema(t, b.Location()), "states")+" SET expires_at = now() - interval '1s'"); err != nil {
		t.Fatal(err)
	}
	if r := b.Cancel(ctx, []*driver.TaskState{{TaskUUID: "x", State: driver.StateCancelled}}); r[0].Err != nil || r[0].Written || r[0].Prev != nil {
		t.Errorf("Cancel of an expired state = %+v; want no Prev, not written", r[0])
	}
	if err := errors.Join(b.SetStates(ctx, []*driver.TaskState{{TaskUUID: "x", TaskName: "w", State: driver.StateSuccess}})...); err != nil {
		t.Errorf("SetStates over an expired CANCELLED: %v; want written (an expired state counts as none)", err)
	}
}

// A waiter of a task wakes on its CANCELLED, written by Cancel on
// another backend (PollInterval is an hour: only the notification can
// wake it in time).
func TestWaitWokenByCancel(t *testing.T) {
	pool := pgdbtest.Pool(t)
	h := harness(t, pool, &postgresbackend.Options{PollInterval: time.Hour})
	waiter, canceller := h.New(t, 0), h.New(t, 0).(*postgresbackend.Backend)
	// A first wait, woken by a SUCCESS, has the waiter's listener LISTEN.
	set(t, canceller, "warm", driver.StateStarted)
	warm := waitFor(waiter, "warm")
	set(t, canceller, "warm", driver.StateSuccess)
	if err := <-warm; err != nil {
		t.Fatal(err)
	}

	set(t, canceller, "c", driver.StateStarted)
	read := make(chan struct{}, 1) // the waiter read STARTED and waits
	got := make(chan *driver.TaskState, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		st, _ := waiter.(driver.StateWaiter).WaitState(ctx, "c", func(st *driver.TaskState) bool {
			if st.State == driver.StateStarted {
				read <- struct{}{}
			}
			return st.State.Terminal()
		})
		got <- st
	}()
	<-read
	if r := canceller.Cancel(context.Background(), []*driver.TaskState{{TaskUUID: "c", State: driver.StateCancelled, FinishedAt: time.Now()}}); r[0].Err != nil || !r[0].Written {
		t.Fatalf("Cancel = %+v; want written", r[0])
	}
	if st := <-got; st == nil || st.State != driver.StateCancelled {
		t.Fatalf("waiter answered %+v; want woken with CANCELLED within %v by Cancel's notification (its PollInterval is an hour)", st, waitBound)
	}
}

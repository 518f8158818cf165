package portable

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

func cancelOf(id string) *driver.TaskState {
	now := time.Now().UTC()
	return &driver.TaskState{TaskUUID: id, State: driver.StateCancelled, Error: "errand: task cancelled", CreatedAt: now, FinishedAt: now}
}

// TestCancelPortablePath: a backend without driver.Canceller is cancelled
// by GetState then SetStates: a task not finished is written CANCELLED
// keeping its name, attempt and CreatedAt; a finished one and an unknown
// one are answered, not written.
func TestCancelPortablePath(t *testing.T) {
	ctx := t.Context()
	mem := memorybackend.New(nil)
	b := WrapBackend(struct{ driver.Backend }{mem}) // no Canceller
	if b.Canceller != nil {
		t.Fatal("a bare backend was found a Canceller")
	}
	created := time.Now().UTC().Add(time.Hour) // after the cancel's FinishedAt
	if errs := mem.SetStates(ctx, []*driver.TaskState{
		{TaskUUID: "p", TaskName: "n", State: driver.StatePending, Attempt: 2, CreatedAt: created},
		{TaskUUID: "s", TaskName: "n", State: driver.StateSuccess, CreatedAt: created},
	}); errs != nil {
		t.Fatal(errs)
	}
	res := b.Cancel(ctx, []*driver.TaskState{cancelOf("p"), cancelOf("s"), cancelOf("x")})
	if len(res) != 3 || !res[0].Written || res[0].Prev.State != driver.StatePending || res[1].Written || res[1].Prev.State != driver.StateSuccess || res[2].Written || res[2].Prev != nil {
		t.Fatalf("Cancel answered %+v; want PENDING written, SUCCESS and unknown not", res)
	}
	st, err := mem.GetState(ctx, "p")
	if err != nil || st.State != driver.StateCancelled || st.TaskName != "n" || st.Attempt != 2 || !st.CreatedAt.Equal(created) || st.FinishedAt.Before(st.CreatedAt) {
		t.Fatalf("cancelled state = %+v, %v; want CANCELLED keeping name, attempt and CreatedAt, FinishedAt not before it", st, err)
	}
	if st, _ := mem.GetState(ctx, "s"); st.State != driver.StateSuccess {
		t.Fatalf("a finished task was overwritten: %+v", st)
	}
}

// lyingCanceller answers what its answer func says.
type lyingCanceller struct {
	driver.Backend
	answer func(sts []*driver.TaskState) []driver.CancelResult
}

func (c lyingCanceller) Cancel(_ context.Context, sts []*driver.TaskState) []driver.CancelResult {
	return c.answer(sts)
}

// TestCancelChecksTheCanceller: a Canceller's answer that breaks its
// contract (the wrong count, written over a finished task, not written
// over one not finished) fails the items it concerns.
func TestCancelChecksTheCanceller(t *testing.T) {
	ctx := t.Context()
	mem := memorybackend.New(nil)
	short := WrapBackend(lyingCanceller{mem, func([]*driver.TaskState) []driver.CancelResult { return nil }})
	for _, r := range short.Cancel(ctx, []*driver.TaskState{cancelOf("a"), cancelOf("b")}) {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "batch convention") {
			t.Fatalf("a Canceller answering no results: %+v; want a batch convention error per item", r)
		}
	}
	done := &driver.TaskState{State: driver.StateSuccess}
	open := &driver.TaskState{State: driver.StateStarted}
	lying := WrapBackend(lyingCanceller{mem, func([]*driver.TaskState) []driver.CancelResult {
		return []driver.CancelResult{{Prev: done, Written: true}, {Prev: open}, {Prev: open, Written: true}, {Err: driver.ErrClosed}}
	}})
	res := lying.Cancel(ctx, []*driver.TaskState{cancelOf("a"), cancelOf("b"), cancelOf("c"), cancelOf("d")})
	if res[0].Err == nil || res[1].Err == nil || res[2].Err != nil || !res[2].Written || !errors.Is(res[3].Err, driver.ErrClosed) {
		t.Fatalf("Cancel answered %+v; want the two broken answers failed, the good one kept, the error passed on", res)
	}
}

package conformance

// The worker cases' recorder must record a task's path in the order the
// backend wrote its states, however the calls' answers come back: a
// Start that wrote and returns late, a Cancel that was called first and
// wrote last.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

// gatedBackend is the memory backend with hooks run before its Start
// writes, after it (before Start returns), and before its Cancel writes.
type gatedBackend struct {
	*memorybackend.Backend
	beforeStart, afterStart, beforeCancel func()
}

func (b *gatedBackend) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	if b.beforeStart != nil {
		b.beforeStart()
	}
	res := b.Backend.Start(ctx, reqs)
	if b.afterStart != nil {
		b.afterStart()
	}
	return res
}

func (b *gatedBackend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	if b.beforeCancel != nil {
		b.beforeCancel()
	}
	return b.Backend.Cancel(ctx, sts)
}

// recordedPair is a recorder over a gated memory backend holding one
// PENDING task, with the recorder's Starter and Canceller.
type recordedPair struct {
	t     *testing.T
	gb    *gatedBackend
	rec   *recorder
	start driver.Starter
	cn    driver.Canceller
	id    string
}

func newRecordedPair(t *testing.T) *recordedPair {
	mb := memorybackend.New(nil)
	t.Cleanup(func() { mb.Close() })
	p := &recordedPair{t: t, gb: &gatedBackend{Backend: mb}, id: name(t, "task")}
	p.rec = &recorder{Backend: p.gb, paths: map[string][]errand.State{}}
	be := p.rec.backend()
	var ok bool
	if p.start, ok = be.(driver.Starter); !ok {
		t.Fatal("the recorder hides the backend's driver.Starter")
	}
	if p.cn, ok = be.(driver.Canceller); !ok {
		t.Fatal("the recorder hides the backend's driver.Canceller")
	}
	pending := &errand.TaskState{TaskUUID: p.id, TaskName: "t", State: errand.StatePending, CreatedAt: time.Now()}
	if err := errors.Join(be.(driver.PendingWriter).SetPendingIfAbsent(context.Background(), []*errand.TaskState{pending})...); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *recordedPair) startReq() []driver.StartRequest {
	st := func(s errand.State) *errand.TaskState {
		return &errand.TaskState{TaskUUID: p.id, TaskName: "t", State: s, Attempt: 1, CreatedAt: time.Now()}
	}
	return []driver.StartRequest{{Received: st(errand.StateReceived), Started: st(errand.StateStarted), FirstDelivery: true}}
}

func (p *recordedPair) doStart() driver.StartResult {
	res := p.start.Start(context.Background(), p.startReq())
	if len(res) != 1 || res[0].Err != nil {
		p.t.Fatalf("Start = %+v", res)
	}
	return res[0]
}

func (p *recordedPair) doCancel() driver.CancelResult {
	res := p.cn.Cancel(context.Background(), []*errand.TaskState{cancelOf(p.id)})
	if len(res) != 1 || res[0].Err != nil {
		p.t.Errorf("Cancel = %+v", res)
		return driver.CancelResult{}
	}
	return res[0]
}

func (p *recordedPair) pathIs(want ...errand.State) {
	p.t.Helper()
	got := p.rec.path(p.id)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		p.t.Errorf("the recorder recorded %v; the backend wrote %v, in that order", got, want)
	}
	if err := driver.ValidPath(got); err != nil && driver.ValidPath(want) == nil {
		p.t.Errorf("the recorder made a valid path invalid: %v", err)
	}
}

// TestRecorderStartAnsweredLate: a Start that wrote STARTED, seen on the
// server and cancelled before the Start call returned (a slow answer), is
// recorded before the cancel (Worker/Cancel/ChordCallback cancels a
// member as soon as it reads STARTED).
func TestRecorderStartAnsweredLate(t *testing.T) {
	p := newRecordedPair(t)
	written, release := make(chan struct{}), make(chan struct{})
	p.gb.afterStart = func() { close(written); <-release }
	done := make(chan driver.StartResult, 1)
	go func() { done <- p.doStart() }()
	<-written
	if st, err := p.gb.GetState(context.Background(), p.id); err != nil || st.State != errand.StateStarted {
		t.Fatalf("after Start wrote: %+v, %v", st, err)
	}
	if r := p.doCancel(); !r.Written || r.Prev == nil || r.Prev.State != errand.StateStarted {
		t.Errorf("Cancel = %+v; want written over STARTED", r)
	}
	close(release)
	if r := <-done; !r.Written {
		t.Fatalf("Start = %+v; want written", r)
	}
	p.pathIs(errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateCancelled)
}

// TestRecorderCancelOvertaken: a Cancel called before a Start but written
// after it (Cancel answers STARTED as its previous state) is recorded
// after the Start.
func TestRecorderCancelOvertaken(t *testing.T) {
	p := newRecordedPair(t)
	calling, release := make(chan struct{}), make(chan struct{})
	p.gb.beforeCancel = func() { close(calling); <-release }
	done := make(chan driver.CancelResult, 1)
	go func() { done <- p.doCancel() }()
	<-calling
	if r := p.doStart(); !r.Written {
		t.Fatalf("Start = %+v; want written", r)
	}
	close(release)
	if r := <-done; !r.Written || r.Prev == nil || r.Prev.State != errand.StateStarted {
		t.Fatalf("Cancel = %+v; want written over STARTED", r)
	}
	p.pathIs(errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateCancelled)
}

// TestRecorderStartRefused: a Start called before a Cancel but refused
// (the Cancel wrote first) leaves nothing in the path.
func TestRecorderStartRefused(t *testing.T) {
	p := newRecordedPair(t)
	calling, release := make(chan struct{}), make(chan struct{})
	p.gb.beforeStart = func() { close(calling); <-release }
	done := make(chan driver.StartResult, 1)
	go func() { done <- p.doStart() }()
	<-calling
	if r := p.doCancel(); !r.Written || r.Prev == nil || r.Prev.State != errand.StatePending {
		t.Errorf("Cancel = %+v; want written over PENDING", r)
	}
	close(release)
	if r := <-done; r.Written {
		t.Fatalf("Start = %+v; want refused over CANCELLED", r)
	}
	p.pathIs(errand.StatePending, errand.StateCancelled)
}

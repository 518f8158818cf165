package errand_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// TestCancelQueuedAnswersEachOutcome: a task no worker has taken is
// recorded CANCELLED (queued), Get then returns a *TaskError of kind
// cancelled satisfying errors.Is(err, ErrCancelled); a second cancel of it
// is finished, an id nobody knows is unknown, each with a nil error.
func TestCancelQueuedAnswersEachOutcome(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t)
	r, err := e.srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.srv.Cancel(ctx, r.Signature.UUID)
	if err != nil || rep.Outcome != errand.CancelQueued || rep.Group || len(rep.Tasks) != 1 ||
		rep.Tasks[0] != (errand.TaskCancel{UUID: r.Signature.UUID, Name: "add", Outcome: errand.CancelQueued, Prev: errand.StatePending}) {
		t.Fatalf("Cancel of a queued task = %+v, %v; want queued, prev PENDING", rep, err)
	}
	_, err = r.Get(ctx)
	var te *errand.TaskError
	if !errors.As(err, &te) || te.Kind != errand.KindCancelled || !errors.Is(err, errand.ErrCancelled) {
		t.Fatalf("Get of a cancelled task = %v; want a *TaskError of kind cancelled satisfying errors.Is(err, ErrCancelled)", err)
	}
	st, err := r.State(ctx)
	if err != nil || st.State != errand.StateCancelled || st.Error != "errand: task cancelled" || st.ErrorKind != "cancelled" || st.FinishedAt.Before(st.CreatedAt) {
		t.Fatalf("cancelled state = %+v, %v; want CANCELLED, its error and kind, FinishedAt not before CreatedAt", st, err)
	}
	if rep, err := r.Cancel(ctx); err != nil || rep.Outcome != errand.CancelFinished || rep.Tasks[0].Prev != errand.StateCancelled {
		t.Fatalf("second cancel = %+v, %v; want finished (prev CANCELLED), nil error", rep, err)
	}
	if rep, err := e.srv.Cancel(ctx, "no-such-task"); err != nil || rep.Outcome != errand.CancelUnknown || rep.Tasks[0].Prev != "" {
		t.Fatalf("cancel of an unknown id = %+v, %v; want unknown, nil error", rep, err)
	}
	if _, err := e.srv.Cancel(ctx, ""); err == nil {
		t.Fatal("cancel of an empty id: want an error")
	}
	e.srv.Close()
	if _, err := e.srv.Cancel(ctx, r.Signature.UUID); !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("cancel on a closed server = %v; want ErrClosed", err)
	}
}

// TestCancelChordByGroupID: a chord's group UUID names its members; a
// chord handle cancels the members and the callback.
func TestCancelChordByGroupID(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t)
	g, _ := errand.NewGroup(errand.NewSignature("add", 1, 2), errand.NewSignature("add", 3, 4))
	c, _ := errand.NewChord(g, errand.NewSignature("add", 10))
	cr, err := e.srv.SendChord(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.srv.Cancel(ctx, g.GroupUUID)
	if err != nil || !rep.Group || rep.Outcome != errand.CancelQueued || len(rep.Tasks) != 2 ||
		rep.Tasks[0].UUID != g.Tasks[0].UUID || rep.Tasks[1].UUID != g.Tasks[1].UUID {
		t.Fatalf("Cancel(group) = %+v, %v; want both members queued, in group order", rep, err)
	}
	rep, err = cr.Cancel(ctx)
	if err != nil || !rep.Group || len(rep.Tasks) != 3 || rep.Tasks[0].Outcome != errand.CancelFinished ||
		rep.Tasks[2].Outcome != errand.CancelQueued || rep.Outcome != errand.CancelQueued {
		t.Fatalf("chord Cancel = %+v, %v; want members finished, callback queued", rep, err)
	}
}

// quietBroker is the memory broker without its cancel notices (a broker
// that sends none): its NotifyCancel and ListenCancel are shadowed by
// methods of other signatures, so it is no driver.CancelNotifier, while
// its co-location (driver.Colocator) stays.
type quietBroker struct{ *memorybroker.Broker }

func (quietBroker) NotifyCancel() {}
func (quietBroker) ListenCancel() {}

var _ driver.Colocator = quietBroker{}

// TestCancelRunningAtLeaseExtension: on a broker that sends no notices
// and a backend without driver.Canceller (the portable path, a
// third-party driver's), a running task's ctx ends, with a cause
// satisfying errors.Is(cause, ErrCancelled), at a lease extension; its
// late success is discarded and its chain's later task cancelled.
func TestCancelRunningAtLeaseExtension(t *testing.T) {
	checkNoLeak(t)
	ctx := ctxT(t)
	br := memorybroker.New(nil)
	rec := &recorder{Backend: memorybackend.New(nil), paths: map[string][]errand.State{}} // hides Canceller
	srv, err := errand.NewServer(errand.Config{Broker: quietBroker{br}, Backend: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.checkPaths(t); srv.Close() })
	causes := make(chan error, 2)
	running := make(chan struct{}, 2)
	srv.Register("hold", func(ctx context.Context) (string, error) {
		running <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "a late success", nil
	})
	srv.Register("tail", func(xs ...string) error { t.Error("the later task of a cancelled chain ran"); return nil })
	w := srv.NewWorker(errand.WorkerConfig{Lease: 300 * time.Millisecond, ExtendEvery: 50 * time.Millisecond})
	w.Start()
	defer w.Shutdown(ctx)
	ch, _ := errand.NewChain(errand.NewSignature("hold"), errand.NewSignature("tail"))
	cr, err := srv.SendChain(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	<-running
	rep, err := srv.Cancel(ctx, ch.Tasks[0].UUID)
	if err != nil || rep.Outcome != errand.CancelRunning {
		t.Fatalf("Cancel of a running task = %+v, %v; want running", rep, err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, errand.ErrCancelled) {
			t.Fatalf("the task's ctx ended with cause %v; want one satisfying errors.Is(cause, ErrCancelled)", cause)
		}
	case <-time.After(10 * time.Second): // a hang bound, not a timing claim
		t.Fatal("a running task was cancelled and its ctx never ended: the lease extension's state check did not find the cancel")
	}
	if _, err := cr.Results[1].Get(ctx); !errors.Is(err, errand.ErrCancelled) {
		t.Fatalf("the chain's later task: Get = %v; want it cancelled", err)
	}
	if _, err := cr.Results[0].Get(ctx); !errors.Is(err, errand.ErrCancelled) {
		t.Fatalf("the cancelled task: Get = %v; want ErrCancelled, its late success discarded", err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.path(ch.Tasks[0].UUID); fmt.Sprint(got) != "[PENDING RECEIVED STARTED CANCELLED]" {
		t.Fatalf("the cancelled task went through %v; want [PENDING RECEIVED STARTED CANCELLED], its late success never written", got)
	}
}

// TestCancelLateResultRefusedByCanceller: a task that ignores its ctx and
// returns after its cancel, before its worker heard of it (no notices, an
// hour-long ExtendEvery), has its result refused by the backend's
// Canceller (an ErrCancelled answer to its SUCCESS, on the two-call path
// and on the co-located settle): the worker records nothing more, sends
// no callback, and the task stays CANCELLED.
func TestCancelLateResultRefusedByCanceller(t *testing.T) {
	checkNoLeak(t)
	ctx := ctxT(t)
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	if _, ok := any(be).(driver.Canceller); !ok {
		t.Fatal("the memory backend is no driver.Canceller")
	}
	srv, err := errand.NewServer(errand.Config{Broker: quietBroker{br}, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	running, release := make(chan struct{}, 2), make(chan struct{})
	srv.Register("stubborn", func(ctx context.Context) (string, error) {
		running <- struct{}{}
		<-release // ignores its ctx
		return "late", nil
	})
	callbacks := make(chan string, 4)
	srv.Register("cb", func(xs ...string) error { callbacks <- "ran"; return nil })
	w := srv.NewWorker(errand.WorkerConfig{Lease: time.Hour})
	w.Start()
	defer w.Shutdown(ctx)

	// With a callback: SUCCESS is a SetStates call of its own.
	withCB := errand.NewSignature("stubborn")
	withCB.OnSuccess = []*errand.Signature{errand.NewSignature("cb")}
	// Quiet: SUCCESS goes with the ack (driver.Colocation.Settle).
	quiet := errand.NewSignature("stubborn")
	var rs []*errand.AsyncResult
	for _, sig := range []*errand.Signature{withCB, quiet} {
		r, err := srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		<-running
		if rep, err := r.Cancel(ctx); err != nil || rep.Outcome != errand.CancelRunning {
			t.Fatalf("Cancel = %+v, %v; want running", rep, err)
		}
	}
	close(release)
	if err := w.Shutdown(ctx); err != nil { // both settled
		t.Fatal(err)
	}
	for i, r := range rs {
		if _, err := r.Get(ctx); !errors.Is(err, errand.ErrCancelled) {
			t.Errorf("task %d: Get = %v after its late success; want it still cancelled", i, err)
		}
	}
	select {
	case <-callbacks:
		t.Error("the OnSuccess callback of a cancelled task ran")
	default:
	}
	if n, _ := br.Stats(ctx, errand.DefaultQueue); n.Pending+n.InFlight+n.Delayed+n.Dead != 0 {
		t.Errorf("queue after the cancelled tasks settled: %+v; want them acked", n)
	}
}

// overwritingBackend is the memory backend as a backend without
// driver.Canceller or driver.Starter whose SetStates overwrites whatever
// a task holds (a plain SET, as a third-party backend's), and whose
// GetState calls afterRead once, after its read, when armed.
type overwritingBackend struct {
	errand.Backend // hides the memory backend's optional interfaces
	mem            *memorybackend.Backend
	armed          atomic.Bool
	afterRead      func(id string)
}

func (b *overwritingBackend) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	var batch []*errand.TaskState
	for _, st := range sts {
		p := st.Copy()
		p.State = errand.StatePending // the memory backend lets a PENDING replace a cancel
		batch = append(batch, p, st)
	}
	errs := b.mem.SetStates(ctx, batch)
	if errs == nil {
		return nil
	}
	out := make([]error, len(sts))
	for i := range sts {
		out[i] = errors.Join(errs[2*i], errs[2*i+1])
	}
	return out
}

func (b *overwritingBackend) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	st, err := b.mem.GetState(ctx, id)
	if b.armed.CompareAndSwap(true, false) {
		b.afterRead(id)
	}
	return st, err
}

// TestCancelBetweenReadAndStartStaysCancelled: on the portable path, a
// cancel landing between a worker's read of the task's state and its
// STARTED is overwritten by that STARTED; the notice still reaches the
// worker, which cancels the task as it starts and records CANCELLED again:
// the task ends CANCELLED, not STARTED for ever.
func TestCancelBetweenReadAndStartStaysCancelled(t *testing.T) {
	checkNoLeak(t)
	ctx := ctxT(t)
	mem := memorybackend.New(nil)
	be := &overwritingBackend{Backend: mem, mem: mem}
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	causes := make(chan error, 1)
	srv.Register("hold", func(ctx context.Context) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	})
	r, err := srv.SendTask(ctx, errand.NewSignature("hold"))
	if err != nil {
		t.Fatal(err)
	}
	be.afterRead = func(id string) {
		if rep, err := srv.Cancel(ctx, id); err != nil || rep.Outcome != errand.CancelQueued {
			t.Errorf("Cancel = %+v, %v; want queued", rep, err)
		}
	}
	be.armed.Store(true)
	w := srv.NewWorker(errand.WorkerConfig{Lease: time.Hour})
	w.Start()
	defer w.Shutdown(ctx)
	select {
	case cause := <-causes:
		if !errors.Is(cause, errand.ErrCancelled) {
			t.Fatalf("the task's ctx ended with %v; want ErrCancelled", cause)
		}
	case <-ctx.Done():
		t.Fatal("the task, cancelled between its read and its start, was never cancelled")
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := r.State(ctx); err != nil || st.State != errand.StateCancelled {
		t.Fatalf("the task's state after its worker settled it: %+v, %v; want CANCELLED (its STARTED had replaced the cancel)", st, err)
	}
}

// TestCancelFreesUniqueKey: the worker that settles a task cancelled
// before it ran frees its unique key, as a task's end does, so the key
// can be taken again long before UniqueFor runs out.
func TestCancelFreesUniqueKey(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t)
	e.srv.Register("add", add)
	unique := func() *errand.Signature {
		sig := errand.NewSignature("add", 1, 2)
		sig.UniqueKey, sig.UniqueFor = "the-one", time.Hour
		return sig
	}
	r, err := e.srv.SendTask(ctx, unique())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.SendTask(ctx, unique()); !errors.Is(err, errand.ErrDuplicate) {
		t.Fatalf("a second send while the key is held = %v; want ErrDuplicate", err)
	}
	if rep, err := r.Cancel(ctx); err != nil || rep.Outcome != errand.CancelQueued {
		t.Fatalf("Cancel = %+v, %v; want queued", rep, err)
	}
	e.start(t, errand.WorkerConfig{})
	for {
		_, err := e.srv.SendTask(ctx, unique())
		if err == nil {
			break
		}
		if !errors.Is(err, errand.ErrDuplicate) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the unique key of a cancelled task was never freed by the worker that settled it")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := r.Get(ctx); !errors.Is(err, errand.ErrCancelled) {
		t.Fatalf("the cancelled task: Get = %v; want ErrCancelled", err)
	}
}

// downBackend is a backend whose reads fail while it is down (a server
// unreachable): it counts the GetState calls made then.
type downBackend struct {
	errand.Backend
	down      atomic.Bool
	downReads atomic.Int32
}

func (b *downBackend) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	if b.down.Load() {
		b.downReads.Add(1)
		return nil, errors.New("test backend: connection refused")
	}
	return b.Backend.GetState(ctx, id)
}

// TestCancelChecksBackOffInBackendOutage: while the backend's reads fail,
// the state checks at lease extensions back off together instead of each
// running task reading once per ExtendEvery into the outage (on Redis,
// those failed dials made go-redis fail the producer's calls after the
// server was back: backends/redis TestServerRestart); once the backend
// answers, a cancel still reaches every running task, within the
// backoff's bound (8×ExtendEvery) and a tick. Fake time (testing/synctest).
func TestCancelChecksBackOffInBackendOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tasks, every, outage = 4, time.Second, 60 * time.Second
		br := memorybroker.New(nil)
		be := &downBackend{Backend: memorybackend.New(nil)}
		srv, err := errand.NewServer(errand.Config{Broker: quietBroker{br}, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		running, causes := make(chan struct{}, tasks), make(chan error, tasks)
		srv.Register("hold", func(ctx context.Context) error {
			running <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
		w := srv.NewWorker(errand.WorkerConfig{Concurrency: tasks, Lease: 3 * every, ExtendEvery: every})
		w.Start()
		ctx := context.Background()
		var ids []string
		for range tasks {
			r, err := srv.SendTask(ctx, errand.NewSignature("hold"))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Signature.UUID)
		}
		for range tasks {
			<-running
		}

		be.down.Store(true)
		time.Sleep(outage)
		be.down.Store(false)
		// Every task renewed 60 times: without the backoff, 240 reads.
		// With it: the first round (at most one per task), then one probe
		// after each backoff (1, 2 and 4 ExtendEvery, then 8 each time).
		if n, most := be.downReads.Load(), int32(tasks+outage/(8*every)+4); n > most {
			t.Errorf("cancel-check promise broken: %d running tasks read their state %d times in an outage of %v with ExtendEvery %v; want at most %d (the checks back off together while reads fail)", tasks, n, outage, every, most)
		}

		for _, id := range ids {
			if rep, err := srv.Cancel(ctx, id); err != nil || rep.Outcome != errand.CancelRunning {
				t.Fatalf("Cancel of a running task = %+v, %v; want running", rep, err)
			}
		}
		bound := time.After(8*every + 2*every)
		for range tasks {
			select {
			case cause := <-causes:
				if !errors.Is(cause, errand.ErrCancelled) {
					t.Fatalf("a task's ctx ended with cause %v; want one satisfying errors.Is(cause, ErrCancelled)", cause)
				}
			case <-bound:
				t.Fatalf("cancel-check promise broken: after the backend came back, a cancelled running task was not cancelled within %v (the backoff's bound, 8×ExtendEvery, and a tick)", 10*every)
			}
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCancelRecordedGroupByID: a plain group sent with RecordGroup is
// cancelled by its UUID from a second Server (an operator's, on the same
// broker and backend): every member, in group order, the running one
// cancelled while it ran, the queued ones before they started, none run
// after; a plain group sent without it keeps no record, so its UUID stays
// unknown and its tasks untouched.
func TestCancelRecordedGroupByID(t *testing.T) {
	checkNoLeak(t)
	ctx := ctxT(t)
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	producer, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 8)
	producer.Register("hold", func(ctx context.Context) error {
		info, _ := errand.TaskInfoFrom(ctx)
		ran <- info.UUID
		<-ctx.Done()
		return context.Cause(ctx)
	})

	// Unrecorded: its UUID names nothing.
	plain, _ := errand.NewGroup(errand.NewSignature("hold"), errand.NewSignature("hold"))
	for _, sig := range plain.Tasks {
		sig.RoutingKey = "idle" // no worker takes them
	}
	if _, err := producer.SendGroup(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if rep, err := operator.Cancel(ctx, plain.GroupUUID); err != nil || rep.Outcome != errand.CancelUnknown || rep.Group {
		t.Fatalf("Cancel(a plain group's UUID) = %+v, %v; want unknown: SendGroup without RecordGroup records no group", rep, err)
	}
	for _, sig := range plain.Tasks {
		if st, err := be.GetState(ctx, sig.UUID); err != nil || st.State != errand.StatePending {
			t.Fatalf("a member of a plain group whose UUID was cancelled: %+v, %v; want it untouched, PENDING", st, err)
		}
	}

	// Recorded: one member running (one worker slot), two queued.
	g, _ := errand.NewGroup(errand.NewSignature("hold"), errand.NewSignature("hold"), errand.NewSignature("hold"))
	rs, err := producer.SendGroup(ctx, g, errand.RecordGroup())
	if err != nil {
		t.Fatal(err)
	}
	w := producer.NewWorker(errand.WorkerConfig{Concurrency: 1})
	w.Start()
	defer func() { // on a failure, the held task is not waited for
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		w.Shutdown(sctx)
	}()
	var first string
	select {
	case first = <-ran:
	case <-ctx.Done():
		t.Fatal("no member of the group ever ran")
	}
	if err := waitStarted(ctx, be, first); err != nil {
		t.Fatal(err)
	}
	rep, err := operator.Cancel(ctx, g.GroupUUID)
	if err != nil || !rep.Group || rep.Outcome != errand.CancelRunning || len(rep.Tasks) != 3 {
		t.Fatalf("Cancel(a recorded group's UUID) = %+v, %v; want Group, outcome running, its 3 members", rep, err)
	}
	for i, tc := range rep.Tasks {
		want := errand.TaskCancel{UUID: g.Tasks[i].UUID, Name: "hold", Outcome: errand.CancelQueued, Prev: errand.StatePending}
		if tc.UUID == first {
			want.Outcome, want.Prev = errand.CancelRunning, errand.StateStarted
		}
		if tc != want {
			t.Errorf("Cancel(group) task %d = %+v; want %+v (members in group order, the running one running, the others queued)", i, tc, want)
		}
	}
	for i, r := range rs {
		if _, err := r.Get(ctx); !errors.Is(err, errand.ErrCancelled) {
			t.Errorf("member %d of the cancelled group: Get = %v; want ErrCancelled", i, err)
		}
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 0 {
		t.Errorf("a member ran after its group was cancelled (%s); only %s, running then, ever ran", <-ran, first)
	}
}

// waitStarted polls task id's state until it is STARTED.
func waitStarted(ctx context.Context, be errand.Backend, id string) error {
	for {
		st, err := be.GetState(ctx, id)
		if err == nil && st.State == errand.StateStarted {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("task %s never was STARTED (last %+v, %v)", id, st, err)
		case <-time.After(time.Millisecond):
		}
	}
}

// TestRecordGroupInsideTx: RecordGroup's record is written inside the
// caller's transaction, as a chord's group is: rolled back with the
// group's tasks, committed with them.
func TestRecordGroupInsideTx(t *testing.T) {
	ctx := ctxT(t)
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	send := func(end func(*memorybroker.Tx) error) *errand.Group {
		t.Helper()
		g, _ := errand.NewGroup(errand.NewSignature("add", 1, 2), errand.NewSignature("add", 3, 4))
		tx := br.Begin()
		if _, err := srv.SendGroup(errand.WithTx(ctx, tx), g, errand.RecordGroup()); err != nil {
			t.Fatal(err)
		}
		if _, err := be.GroupStates(ctx, g.GroupUUID); !errors.Is(err, driver.ErrGroupNotFound) {
			t.Fatalf("a recorded group inside an open transaction: GroupStates = %v; want ErrGroupNotFound until the commit", err)
		}
		if err := end(tx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := send((*memorybroker.Tx).Rollback)
	if _, err := be.GroupStates(ctx, g.GroupUUID); !errors.Is(err, driver.ErrGroupNotFound) {
		t.Errorf("a recorded group whose transaction rolled back: GroupStates = %v; want ErrGroupNotFound", err)
	}
	g = send((*memorybroker.Tx).Commit)
	sts, err := be.GroupStates(ctx, g.GroupUUID)
	if err != nil || len(sts) != 2 || sts[0].TaskUUID != g.Tasks[0].UUID || sts[1].TaskUUID != g.Tasks[1].UUID {
		t.Fatalf("a recorded group whose transaction committed: GroupStates = %v, %v; want its 2 members in order", sts, err)
	}
}

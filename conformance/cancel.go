package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Cancelling tasks (errand.Server.Cancel): the Broker/CancelNotify case
// checks a broker's notices (driver.CancelNotifier, BrokerCaps.CancelNotify);
// the Worker/Cancel cases run on every RunWorker pair, since a cancel
// works on any broker and backend: recorded in the backend (through its
// driver.Canceller, or the portable path), found by the worker when it
// takes the task, at once from a notice on a broker that sends them, and
// at each lease extension on every broker.

// cancelNotify: every listener of the broker hears each notice sent after
// its ListenCancel returned, once, with its UUIDs as sent, one call at a
// time; a listener whose ctx ended hears no more; after Close both
// methods return an error instead of blocking.
func cancelNotify(t testing.TB, h BrokerHarness) {
	const promise = "cancel notices (driver.CancelNotifier)"
	c := newBCase(t, h)
	n, ok := c.drv.(driver.CancelNotifier)
	if !ok {
		t.Logf("the broker sends no cancel notices (BrokerCaps.CancelNotify false): nothing to check here (Capabilities checks the declaration; workers find cancels at their lease extensions)")
		return
	}
	type listener struct {
		mu      sync.Mutex
		got     [][]string
		busy    atomic.Bool
		overlap atomic.Bool
		heard   chan struct{}
	}
	listen := func(ctx context.Context) *listener {
		l := &listener{heard: make(chan struct{}, 64)}
		err := n.ListenCancel(ctx, func(ids []string) {
			if !l.busy.CompareAndSwap(false, true) {
				l.overlap.Store(true)
			}
			l.mu.Lock()
			l.got = append(l.got, slices.Clone(ids))
			l.mu.Unlock()
			l.busy.Store(false)
			l.heard <- struct{}{}
		})
		if err != nil {
			t.Fatalf("%s promise broken: ListenCancel: %v", promise, err)
		}
		return l
	}
	a := listen(c.ctx)
	bctx, stopB := context.WithCancel(c.ctx)
	defer stopB()
	b := listen(bctx)
	notices := [][]string{{name(t, "a"), name(t, "b")}, {name(t, "c")}, {name(t, "d"), name(t, "e"), name(t, "f")}}
	for _, ids := range notices {
		if err := n.NotifyCancel(c.ctx, ids); err != nil {
			t.Fatalf("%s promise broken: NotifyCancel(%v): %v", promise, ids, err)
		}
	}
	wait := func(l *listener, k int, who string) [][]string {
		t.Helper()
		for range k {
			select {
			case <-l.heard:
			case <-time.After(c.tm.Prompt * 5):
				l.mu.Lock()
				defer l.mu.Unlock()
				t.Fatalf("%s promise broken: listener %s heard %v; want each of the %d notices sent after it listened, %v", promise, who, l.got, len(notices), notices)
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.Clone(l.got)
	}
	for _, l := range []struct {
		l   *listener
		who string
	}{{a, "one"}, {b, "two"}} {
		got := wait(l.l, len(notices), l.who)
		sortNotices := func(ns [][]string) []string {
			var out []string
			for _, ids := range ns {
				out = append(out, strings.Join(ids, ","))
			}
			slices.Sort(out)
			return out
		}
		if g, w := sortNotices(got), sortNotices(notices); !slices.Equal(g, w) {
			t.Errorf("%s promise broken: listener %s heard %v; want every notice once, each with its UUIDs as sent: %v", promise, l.who, got, notices)
		}
		if l.l.overlap.Load() {
			t.Errorf("%s promise broken: listener %s's notify was called while a call of it was running; want one call at a time", promise, l.who)
		}
	}
	// A listener whose ctx ended hears no more; the other does.
	stopB()
	last := []string{name(t, "g")}
	if err := n.NotifyCancel(c.ctx, last); err != nil {
		t.Fatalf("%s promise broken: NotifyCancel(%v): %v", promise, last, err)
	}
	if got := wait(a, 1, "one"); !slices.Equal(got[len(got)-1], last) {
		t.Errorf("%s promise broken: listener one heard %v last; want %v", promise, got[len(got)-1], last)
	}

	// After Close: an error, never a block or a panic.
	if err := c.drv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	done := make(chan [2]error, 1)
	go func() {
		e1 := n.NotifyCancel(context.Background(), []string{"x"})
		e2 := n.ListenCancel(context.Background(), func([]string) {})
		done <- [2]error{e1, e2}
	}()
	select {
	case errs := <-done:
		if errs[0] == nil || errs[1] == nil {
			t.Errorf("%s promise broken: after Close, NotifyCancel returned %v and ListenCancel %v; want an error from both", promise, errs[0], errs[1])
		}
	case <-time.After(c.tm.Prompt):
		t.Errorf("%s promise broken: after Close, NotifyCancel or ListenCancel blocked for %v; want an error at once", promise, c.tm.Prompt)
	}
}

// recCanceller is the recorder's driver.Canceller: it records CANCELLED
// in the path of each task the backend wrote it for, after the state the
// backend answers it replaced.
type recCanceller struct{ r *recorder }

func (c recCanceller) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	// Recorded before the call (a waiter woken by it finds it), taken
	// back where it was not written.
	c.r.mu.Lock()
	c.r.wrote("Cancel")
	for _, st := range sts {
		c.r.paths[st.TaskUUID] = append(c.r.paths[st.TaskUUID], errand.StateCancelled)
	}
	c.r.mu.Unlock()
	res := c.r.Backend.(driver.Canceller).Cancel(ctx, sts)
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	for i, st := range sts {
		if i < len(res) && res[i].Err == nil && res[i].Written {
			if res[i].Prev != nil {
				c.r.after(st.TaskUUID, errand.StateCancelled, res[i].Prev.State)
			}
			continue
		}
		c.r.takeBack(st.TaskUUID, errand.StateCancelled)
	}
	return res
}

// The Worker/Cancel cases.

const cancelPromise = "cancel (a cancelled task never starts, a running one sees ErrCancelled as its ctx's cause, and its outcome is discarded)"

// cancelCase is a worker case with tasks that tell when they run.
type cancelCase struct {
	*wcase
	ran chan string // the name (and tag) of every task run
}

func newCancelCase(t testing.TB, p workerPair) *cancelCase {
	c := &cancelCase{wcase: newWCase(t, p), ran: make(chan string, 64)}
	// quick: runs and returns; tail: a chain's later task, which must
	// never run once its chain is cancelled.
	c.register("quick", func(tag string) (string, error) { c.ran <- "quick " + tag; return tag, nil })
	c.register("tail", func(xs ...string) (string, error) { c.ran <- "tail"; return "tail", nil })
	return c
}

// cancel cancels id and checks the report's outcome.
func (c *cancelCase) cancel(id string, want errand.CancelOutcome, prev ...errand.State) errand.CancelReport {
	c.t.Helper()
	rep, err := c.srv.Cancel(c.ctx, id)
	if err != nil {
		c.t.Fatalf("%s promise broken: Cancel(%s) = %v; want a report", cancelPromise, id, err)
	}
	if rep.Outcome != want || (len(prev) > 0 && (len(rep.Tasks) != 1 || !slices.Contains(prev, rep.Tasks[0].Prev))) {
		c.t.Fatalf("%s promise broken: Cancel(%s) = %+v; want outcome %s, previous state one of %v", cancelPromise, id, rep, want, prev)
	}
	return rep
}

// cancelled waits for r's task to end and checks it is CANCELLED, its
// Get a *TaskError satisfying errors.Is(err, ErrCancelled).
func (c *cancelCase) cancelled(r *errand.AsyncResult, what string) {
	c.t.Helper()
	_, err := r.Get(c.ctx)
	var te *errand.TaskError
	if !errors.As(err, &te) || te.Kind != errand.KindCancelled || !errors.Is(err, errand.ErrCancelled) {
		st, serr := r.State(c.ctx)
		c.t.Fatalf("%s promise broken: %s ended with Get = %v (state %+v, %v); want CANCELLED: a *TaskError of kind %q satisfying errors.Is(err, ErrCancelled)", cancelPromise, what, err, st, serr, errand.KindCancelled)
	}
}

// never checks that nothing ran beyond what ran already (allowed).
func (c *cancelCase) never(allowed ...string) {
	c.t.Helper()
	for {
		select {
		case what := <-c.ran:
			if !slices.Contains(allowed, what) {
				c.t.Errorf("%s promise broken: %s ran; a cancelled task (or a later task of its chain, or its chord's callback) must never run", cancelPromise, what)
			}
		default:
			return
		}
	}
}

// chainOf sends the chain head → tail and returns its handles.
func (c *cancelCase) chainOf(head *errand.Signature) (*errand.AsyncResult, *errand.AsyncResult) {
	c.t.Helper()
	tail := errand.NewSignature("tail")
	ch, _ := errand.NewChain(head, tail)
	r, err := c.srv.SendChain(c.ctx, ch)
	if err != nil {
		c.t.Fatal(err)
	}
	return r.Results[0], r.Results[1]
}

// cancelQueued: a task cancelled before any worker takes it never runs;
// the worker that takes its message settles it, and cancels the chain's
// later task (its end is what the case waits for).
func cancelQueued(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	head, tail := c.chainOf(errand.NewSignature("quick", "head"))
	c.cancel(head.Signature.UUID, errand.CancelQueued, errand.StatePending)
	c.start(errand.WorkerConfig{})
	c.cancelled(tail, "the later task of a chain whose first task was cancelled")
	c.cancelled(head, "a task cancelled before it ran")
	c.never()
	c.pathIs(head.Signature.UUID, errand.StatePending, errand.StateCancelled)
}

// cancelScheduled: the same for a task sent with an ETA.
func cancelScheduled(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	sig := errand.NewSignature("quick", "head")
	eta := time.Now().Add(c.tm.Delay)
	sig.ETA = &eta
	head, tail := c.chainOf(sig)
	c.cancel(head.Signature.UUID, errand.CancelQueued, errand.StatePending)
	c.start(errand.WorkerConfig{})
	c.cancelled(tail, "the later task of a chain whose first task, scheduled, was cancelled")
	c.cancelled(head, "a scheduled task cancelled before its ETA")
	c.never()
}

// cancelRetrying: a task waiting for its retry is cancelled: the retry
// never runs.
func cancelRetrying(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	var runs atomic.Int32
	c.register("flaky", func(ctx context.Context) (string, error) {
		if runs.Add(1) == 1 {
			return "", errand.RetryLater(2*c.tm.Prompt, errors.New("not yet"))
		}
		c.ran <- "flaky retry"
		return "late", nil
	})
	sig := errand.NewSignature("flaky")
	sig.RetryCount = 3
	head, tail := c.chainOf(sig)
	c.start(errand.WorkerConfig{})
	if err := c.waitState(head, errand.StateRetry); err != nil {
		t.Fatalf("%s: the task never reached RETRY: %v", cancelPromise, err)
	}
	c.cancel(head.Signature.UUID, errand.CancelQueued, errand.StateRetry)
	c.cancelled(tail, "the later task of a chain whose first task was cancelled while waiting for its retry")
	c.cancelled(head, "a task cancelled while waiting for its retry")
	c.never()
	if n := runs.Load(); n != 1 {
		t.Errorf("%s promise broken: a task cancelled while waiting for its retry ran %d times; want once (the retry never runs)", cancelPromise, n)
	}
}

// runningWorker starts a worker whose "hold" task runs until its ctx ends
// and tells the cause; with a broker that sends notices, ExtendEvery is
// so long that only the notice can cancel it in time.
func (c *cancelCase) runningWorker(p workerPair) (w *errand.Worker, causes chan error) {
	causes = make(chan error, 8)
	c.register("hold", func(ctx context.Context, tag string) (string, error) {
		c.ran <- "hold " + tag
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", context.Cause(ctx)
	})
	c.register("late", func(ctx context.Context, tag string) (string, error) {
		c.ran <- "late " + tag
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "a late success, after its ctx was cancelled", nil // ignores its ctx's end
	})
	cfg := errand.WorkerConfig{Concurrency: 4}
	if p.broker.Caps.CancelNotify {
		cfg.Lease = time.Hour // ExtendEvery 20 minutes: only the notice is in time
	} else {
		cfg.Lease = c.lease // ExtendEvery: a third of it
	}
	return c.start(cfg), causes
}

// settled shuts w down, so that whatever the worker would record of a
// cancelled task is recorded.
func (c *cancelCase) settled(w *errand.Worker) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt*10)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		c.t.Fatalf("worker shutdown: %v", err)
	}
}

// started waits for r's task to be STARTED.
func (c *cancelCase) started(r *errand.AsyncResult, tag string) {
	c.t.Helper()
	c.recvRan(tag)
	if err := c.waitState(r, errand.StateStarted); err != nil {
		c.t.Fatalf("%s: the task %s never was STARTED: %v", cancelPromise, tag, err)
	}
}

// recvRan waits for what to run.
func (c *cancelCase) recvRan(what string) {
	c.t.Helper()
	select {
	case got := <-c.ran:
		if got != what {
			c.t.Fatalf("%s: %s ran, want %s", cancelPromise, got, what)
		}
	case <-c.ctx.Done():
		c.t.Fatalf("%s: %s never ran", cancelPromise, what)
	}
}

// waitState polls r's state until it is want (a state the case waits
// for, not one it asserts: AsyncResult.Wait waits for terminal states
// only).
func (c *cancelCase) waitState(r *errand.AsyncResult, want errand.State) error {
	for {
		st, err := r.State(c.ctx)
		if err == nil && st.State == want {
			return nil
		}
		if err != nil && !errors.Is(err, errand.ErrTaskNotFound) {
			return err
		}
		if err := sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/100)); err != nil {
			return fmt.Errorf("still %+v after the case's time: %w", st, err)
		}
	}
}

// causeWithin waits for a cause on causes, within the kit's hang bound.
func (c *cancelCase) causeWithin(causes chan error, how string) {
	c.t.Helper()
	select {
	case cause := <-causes:
		if !errors.Is(cause, errand.ErrCancelled) {
			c.t.Fatalf("%s promise broken: the running task's ctx ended with cause %v; want one satisfying errors.Is(cause, ErrCancelled)", cancelPromise, cause)
		}
	case <-time.After(c.tm.Prompt * 5):
		c.t.Fatalf("%s promise broken: a running task was cancelled and its ctx still had not ended after %v (%s)", cancelPromise, c.tm.Prompt*5, how)
	}
}

func (c *cancelCase) how(p workerPair) string {
	if p.broker.Caps.CancelNotify {
		return "the broker declares CancelNotify: its notice must reach the worker; ExtendEvery is 20 minutes"
	}
	return "the broker sends no notices: the worker must find the cancel at its next lease extension"
}

// cancelRunning: a running task's ctx ends with a cause satisfying
// errors.Is(cause, ErrCancelled); its error is neither retried nor
// recorded as a failure: the task stays CANCELLED.
func cancelRunning(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	w, causes := c.runningWorker(p)
	sig := errand.NewSignature("hold", "running")
	sig.RetryCount = 3
	r := c.send(sig)
	c.started(r, "hold running")
	c.cancel(sig.UUID, errand.CancelRunning, errand.StateStarted, errand.StateReceived)
	c.causeWithin(causes, c.how(p))
	c.cancelled(r, "a task cancelled while it ran")
	c.settled(w) // nothing more is recorded, and it never runs again
	c.never()
	c.pathIs(sig.UUID, errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateCancelled)
}

// cancelIgnoresCtx: a task that returns a success after its ctx was
// cancelled has it discarded: the task stays CANCELLED, and its chain's
// later task is cancelled, never run.
func cancelIgnoresCtx(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	w, causes := c.runningWorker(p)
	head, tail := c.chainOf(errand.NewSignature("late", "head"))
	c.started(head, "late head")
	c.cancel(head.Signature.UUID, errand.CancelRunning, errand.StateStarted, errand.StateReceived)
	c.causeWithin(causes, c.how(p))
	c.cancelled(tail, "the later task of a chain whose running first task was cancelled")
	c.cancelled(head, "a task that returned a success after it was cancelled")
	c.settled(w)
	c.never()
	c.pathIs(head.Signature.UUID, errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateCancelled)
}

// cancelChain: a chain cancelled while its first task runs stops: its
// later tasks are recorded CANCELLED and never run; the cancelled task's
// OnError callbacks never run (a cancel is not a failure).
func cancelChain(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	_, causes := c.runningWorker(p)
	c.register("onerr", func(msg string) error { c.ran <- "onerr"; return nil })
	first := errand.NewSignature("hold", "first")
	first.OnError = []*errand.Signature{errand.NewSignature("onerr")}
	second, third := errand.NewSignature("tail"), errand.NewSignature("tail")
	ch, _ := errand.NewChain(first, second, third)
	r, err := c.srv.SendChain(c.ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	c.started(r.Results[0], "hold first")
	c.cancel(first.UUID, errand.CancelRunning, errand.StateStarted, errand.StateReceived)
	c.causeWithin(causes, c.how(p))
	for i, rr := range r.Results {
		c.cancelled(rr, fmt.Sprintf("task %d of a chain cancelled while its first task ran", i))
	}
	if _, err := r.Get(c.ctx); !errors.Is(err, errand.ErrCancelled) {
		t.Errorf("%s promise broken: a cancelled chain's Get = %v; want an error satisfying errors.Is(err, ErrCancelled)", cancelPromise, err)
	}
	c.never()
	for _, s := range []*errand.Signature{second, third} {
		c.pathIs(s.UUID, errand.StatePending, errand.StateCancelled)
	}
}

// cancelChord: a chord whose member is cancelled while it runs, none
// failing, has its callback recorded CANCELLED: never run, its OnError
// callbacks not run; the other members run on.
func cancelChord(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	_, causes := c.runningWorker(p)
	c.register("gather", func(xs ...string) (string, error) { c.ran <- "gather"; return strings.Join(xs, ","), nil })
	c.register("onerr", func(msg string) error { c.ran <- "onerr"; return nil })
	held := errand.NewSignature("hold", "member")
	g, _ := errand.NewGroup(errand.NewSignature("quick", "a"), held, errand.NewSignature("quick", "c"))
	cb := errand.NewSignature("gather")
	cb.OnError = []*errand.Signature{errand.NewSignature("onerr")}
	ch, _ := errand.NewChord(g, cb)
	r, err := c.srv.SendChord(c.ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitState(r.Group[1], errand.StateStarted); err != nil {
		t.Fatalf("%s: the chord member never was STARTED: %v", cancelPromise, err)
	}
	c.cancel(held.UUID, errand.CancelRunning, errand.StateStarted, errand.StateReceived)
	c.causeWithin(causes, c.how(p))
	c.cancelled(r.Callback, "the callback of a chord one of whose members was cancelled (none failed)")
	for _, i := range []int{0, 2} {
		if _, err := r.Group[i].Get(c.ctx); err != nil {
			t.Errorf("%s promise broken: chord member %d, not cancelled, ended %v; the other members run on", cancelPromise, i, err)
		}
	}
	c.never("quick a", "quick c", "hold member")
	c.pathIs(cb.UUID, errand.StatePending, errand.StateCancelled)
}

// cancelGroupMember: a chord member cancelled before it ran counts toward
// its group's completion (the group completes, its callback cancelled),
// and a cancel by the group's UUID names its members in group order.
func cancelGroupMember(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	c.register("gather", func(xs ...string) (string, error) { c.ran <- "gather"; return strings.Join(xs, ","), nil })
	a, b := errand.NewSignature("quick", "a"), errand.NewSignature("quick", "b")
	g, _ := errand.NewGroup(a, b)
	ch, _ := errand.NewChord(g, errand.NewSignature("gather"))
	r, err := c.srv.SendChord(c.ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	c.cancel(b.UUID, errand.CancelQueued, errand.StatePending)
	rep, err := c.srv.Cancel(c.ctx, g.GroupUUID)
	if err != nil || !rep.Group || len(rep.Tasks) != 2 || rep.Tasks[0].UUID != a.UUID || rep.Tasks[1].UUID != b.UUID ||
		rep.Tasks[1].Outcome != errand.CancelFinished || rep.Tasks[0].Outcome != errand.CancelQueued || rep.Outcome != errand.CancelQueued {
		t.Fatalf("%s promise broken: Cancel(group UUID) = %+v, %v; want Group, its two members in group order: the first queued, the second finished (cancelled already)", cancelPromise, rep, err)
	}
	c.start(errand.WorkerConfig{})
	c.cancelled(r.Callback, "the callback of a chord whose members were cancelled before they ran")
	c.cancelled(r.Group[0], "a chord member cancelled before it ran")
	c.never()
}

// cancelOutcomes: a cancel of an unknown id or of a finished task is an
// answer, not an error, and changes nothing.
func cancelOutcomes(t testing.TB, p workerPair) {
	c := newCancelCase(t, p)
	c.start(errand.WorkerConfig{})
	rep := c.cancel(name(t, "nobody"), errand.CancelUnknown)
	if len(rep.Tasks) != 1 || rep.Tasks[0].Outcome != errand.CancelUnknown || rep.Tasks[0].Prev != "" || rep.Group {
		t.Errorf("%s promise broken: cancel of an unknown id = %+v; want one task, unknown, no previous state", cancelPromise, rep)
	}
	r := c.send(errand.NewSignature("quick", "done"))
	var out string
	if err := r.GetInto(c.ctx, &out); err != nil || out != "done" {
		t.Fatalf("the task ended %q, %v", out, err)
	}
	rep = c.cancel(r.Signature.UUID, errand.CancelFinished, errand.StateSuccess)
	if rep.Tasks[0].Name != "quick" {
		t.Errorf("%s promise broken: cancel of a finished task names it %q; want quick", cancelPromise, rep.Tasks[0].Name)
	}
	if err := r.GetInto(c.ctx, &out); err != nil || out != "done" {
		t.Errorf("%s promise broken: a finished task, cancelled, now reads %q, %v; want its result unchanged", cancelPromise, out, err)
	}
	c.never("quick done")
}

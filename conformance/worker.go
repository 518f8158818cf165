package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// RunWorker runs the end-to-end cases — retries, workflows, failures,
// shutdown, redelivery — through errand's real worker loop on a broker and
// a backend, as subtests named Worker/<Case>/<Subcase>. Every task's
// recorded state sequence is checked against the state graph with
// [driver.ValidPath], and its state as stored when the case ends keeps its
// times in order: CreatedAt ≤ StartedAt ≤ FinishedAt.
func RunWorker(t *testing.T, bh BrokerHarness, beh BackendHarness) {
	bh.Timing = bh.Timing.withDefaults()
	beh.Timing = beh.Timing.withDefaults()
	pair := workerPair{bh, beh}
	t.Run("Worker", func(t *testing.T) { runCases(t, pair, bh.Timing, bh.Serial || beh.Serial, workerCases) })
}

type workerPair struct {
	broker  BrokerHarness
	backend BackendHarness
}

var workerCases = []kase[workerPair]{
	{"Capabilities", workerCapabilities, parallel},
	{"Task/ArgumentRoundTrip", taskArgs, parallel},
	{"Task/HeadersRoundTrip", taskHeaders, parallel},
	{"Retry/Fibonacci", retryFibonacci, parallel},
	{"Retry/Policy", retryPolicy, parallel},
	{"Retry/Later", retryLater, parallel},
	{"Retry/Permanent", retryPermanent, parallel},
	{"Chain/ArgumentOrder", chainOrder, parallel},
	{"Group/Results", groupResults, parallel},
	{"Chord/ArgumentOrder", chordOrder, parallel},
	{"Chord/MemberFails", chordMemberFails, parallel},
	{"Chord/StraysIgnored", chordStrays, parallel},
	{"Callbacks/OnSuccessOnError", callbacks, parallel},
	{"Failure/Panic", failurePanic, parallel},
	{"Failure/Timeout", failureTimeout, parallel},
	{"Failure/UnknownTask", failureUnknown, parallel},
	{"Failure/BadArguments", failureBadArgs, parallel},
	{"Failure/KindsReachProducer", failureKinds, parallel},
	{"BadMessage/WorkerGoesOn", badMessageWorker, parallel},
	{"BadMessage/ForgedUUID", forgedUUID, parallel},
	{"BadMessage/ForeignBytes", foreignBytes, parallel},
	{"Redelivery/CrashedWorker", crashedWorker, parallel},
	{"Shutdown/ReleasesUnfinished", shutdownReleases, parallel},
	{"Shutdown/KeepsLateResults", shutdownKeepsLate, parallel},
	{"Lease/LostCancelsTask", leaseLostCancels, parallel},
	{"Archive/FailedTask", archiveFailedTask, parallel},
	{"Archive/Undecodable", archiveUndecodable, parallel},
	{"Pause", pauseWorker, parallel},
	{"Heartbeat", heartbeatWorker, parallel},
	{"Unique/ReleasedOnFinish", uniqueReleasedOnFinish, parallel},
	{"RateLimit/Delays", rateLimitDelays, parallel},
	{"Concurrency/Limit", concurrencyLimit, parallel},
	{"Queues/Weighted", queuesWeighted, parallel},
	{"Queues/Strict", queuesStrict, parallel},
	{"Queues/Cap", queuesCap, parallel},
	{"Colocation/Send", carriedPending, parallel},
	{"Colocation/Settle", carriedSettle, parallel},
	{"Colocation/Start", carriedStart, parallel},
	{"Tx/Commit", txCommit, parallel},
	{"Tx/Rollback", txRollback, parallel},
	{"Tx/Workflows", txWorkflows, parallel},
	{"Tx/Refused", txRefused, parallel},
	{"Cancel/Queued", cancelQueued, parallel},
	{"Cancel/Scheduled", cancelScheduled, parallel},
	{"Cancel/Retrying", cancelRetrying, parallel},
	{"Cancel/Running", cancelRunning, parallel},
	{"Cancel/IgnoresCtx", cancelIgnoresCtx, parallel},
	{"Cancel/ChainStops", cancelChain, parallel},
	{"Cancel/ChordCallback", cancelChord, parallel},
	{"Cancel/GroupMember", cancelGroupMember, parallel},
	{"Cancel/Outcomes", cancelOutcomes, parallel},
	{"Snooze", workerSnooze, parallel},
	{"Progress", workerProgress, parallel},
}

// workerCapabilities checks the pair's declarations as the Broker and
// Backend Capabilities cases do: a pair run only by RunWorker (a broker
// of one server with a backend of another, end to end) declares what
// decides which Worker cases check what (CancelNotify, Concurrency, Tx,
// Cancel, ...), and a declaration left behind by its driver must fail
// here too, not quietly narrow those cases.
func workerCapabilities(t testing.TB, p workerPair) {
	brokerCapabilities(t, p.broker)
	backendCapabilities(t, p.backend)
}

// recorder wraps a backend to record each task's states, and counts the
// state writes errand makes through it, by method.
type recorder struct {
	errand.Backend
	mu     sync.Mutex
	paths  map[string][]errand.State
	writes map[string]int // calls of SetStates, Start, SetPendingIfAbsent
	// progress counts each task's progress writes: its STARTED written
	// again with Progress (errand.SetProgress), the same state, not a
	// step of its path.
	progress map[string]int
}

// progressWrites returns how many progress writes task id made.
func (r *recorder) progressWrites(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.progress[id]
}

// wrote counts a call of method; r.mu must be held.
func (r *recorder) wrote(method string) {
	if r.writes == nil {
		r.writes = map[string]int{}
	}
	r.writes[method]++
}

// writeCalls returns the state writes made so far, by method.
func (r *recorder) writeCalls() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.writes)
}

// checkPaths checks, when t's case ends, that every task went through an
// allowed sequence of states, and that the state each has then (read back
// from the backend: what every writer left, the carried ones too) keeps
// its times in order.
func (r *recorder) checkPaths(t testing.TB) {
	t.Cleanup(func() {
		r.mu.Lock()
		ids := make([]string, 0, len(r.paths))
		for id, p := range r.paths {
			ids = append(ids, id)
			if err := driver.ValidPath(p); err != nil {
				t.Errorf("states promise broken: task %s went through %v: %v", id, p, err)
			}
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range ids {
			st, err := r.Backend.GetState(ctx, id)
			if err != nil {
				continue // expired, or never written: nothing to order
			}
			if why := timesOutOfOrder(st); why != "" {
				t.Errorf("states promise broken: task %s is stored %s with %s; want CreatedAt <= StartedAt <= FinishedAt (a task never starts before it was created, nor ends before it started, whichever clock wrote each time)", id, st.State, why)
			}
		}
	})
}

// timesOutOfOrder says how st's times break CreatedAt <= StartedAt <=
// FinishedAt (each compared where set), or returns "".
func timesOutOfOrder(st *errand.TaskState) string {
	created, started, finished := st.CreatedAt, st.StartedAt, st.FinishedAt
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	switch {
	case !started.IsZero() && started.Before(created):
		return fmt.Sprintf("StartedAt %s before CreatedAt %s", stamp(started), stamp(created))
	case !finished.IsZero() && !started.IsZero() && finished.Before(started):
		return fmt.Sprintf("FinishedAt %s before StartedAt %s", stamp(finished), stamp(started))
	case !finished.IsZero() && finished.Before(created):
		return fmt.Sprintf("FinishedAt %s before CreatedAt %s", stamp(finished), stamp(created))
	}
	return ""
}

// SetStates records the states before writing them, so a waiter woken by
// a write always finds it recorded, and takes back each state whose write
// failed. It writes in one call of the wrapped backend, so the kit drives
// the path errand takes in production.
func (r *recorder) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	r.mu.Lock()
	r.wrote("SetStates")
	progress := make([]bool, len(sts))
	for i, st := range sts {
		p := r.paths[st.TaskUUID]
		if st.State == errand.StateStarted && len(st.Progress) > 0 && len(p) > 0 && p[len(p)-1] == errand.StateStarted {
			if r.progress == nil {
				r.progress = map[string]int{}
			}
			r.progress[st.TaskUUID]++
			progress[i] = true
			continue
		}
		r.paths[st.TaskUUID] = append(p, st.State)
	}
	r.mu.Unlock()
	errs := r.Backend.SetStates(ctx, sts)
	if len(errs) != len(sts) {
		return errs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(sts) - 1; i >= 0; i-- {
		if errs[i] == nil || progress[i] {
			continue
		}
		r.takeBack(sts[i].TaskUUID, sts[i].State)
	}
	return errs
}

// The recorder records each state before the call that writes it, so a
// waiter woken by the write finds it and a write the case made after
// reading a state on the server is recorded after that state; it takes
// back what the backend did not write. Two calls in flight at once may
// still be recorded in the other order than the backend wrote them: a
// Cancel, which answers the state it replaced, is then moved after it
// (recCanceller).

// takeBack removes the last s from task id's path (and the path, left
// empty): a state recorded before its write, which the backend did not
// make. r.mu must be held.
func (r *recorder) takeBack(id string, s errand.State) {
	p := r.paths[id]
	if i := lastIndex(p, s); i >= 0 {
		p = slices.Delete(p, i, i+1)
	}
	if len(p) == 0 {
		delete(r.paths, id)
		return
	}
	r.paths[id] = p
}

// after moves the last s of task id's path to just after the last prev,
// when prev was recorded after it: the backend answered that s replaced
// prev, so prev's write came first. What was recorded after prev stays
// after s. r.mu must be held.
func (r *recorder) after(id string, s, prev errand.State) {
	p := r.paths[id]
	i, k := lastIndex(p, s), lastIndex(p, prev)
	if i < 0 || k < i {
		return
	}
	p = slices.Delete(p, i, i+1)
	r.paths[id] = slices.Insert(p, k, s)
}

// lastIndex returns the index of the last s in p, or -1.
func lastIndex(p []errand.State, s errand.State) int {
	for j := len(p) - 1; j >= 0; j-- {
		if p[j] == s {
			return j
		}
	}
	return -1
}

func (r *recorder) path(id string) []errand.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]errand.State(nil), r.paths[id]...)
}

type wcase struct {
	t      testing.TB
	tm     Timing
	srv    *errand.Server
	broker errand.Broker
	caps   BrokerCaps
	rec    *recorder
	queue  string
	ctx    context.Context
	lease  time.Duration
}

func newWCase(t testing.TB, p workerPair) *wcase {
	tm := p.broker.Timing
	rec := &recorder{Backend: p.backend.New(t, 0), paths: map[string][]errand.State{}}
	be := rec.backend() // with the wrapped backend's optional capabilities
	c := &wcase{t: t, tm: tm, caps: p.broker.Caps, broker: p.broker.New(t), rec: rec, queue: name(t, "q"), ctx: caseCtx(t, tm), lease: tm.Lease * 3}
	srv, err := errand.NewServer(errand.Config{Broker: c.broker, Backend: be, DefaultQueue: c.queue})
	if err != nil {
		t.Fatal(err)
	}
	c.srv = srv
	rec.checkPaths(t)
	return c
}

func (c *wcase) register(name string, fn any, opts ...errand.TaskOption) {
	c.t.Helper()
	if err := c.srv.Register(name, fn, opts...); err != nil {
		c.t.Fatalf("Register(%s): %v", name, err)
	}
}

// start runs a worker until the case ends.
func (c *wcase) start(cfg errand.WorkerConfig) *errand.Worker {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.Lease == 0 {
		cfg.Lease = c.lease
	}
	if cfg.ErrorBackoff == 0 {
		cfg.ErrorBackoff = c.tm.Prompt / 10
	}
	w := c.srv.NewWorker(cfg)
	w.Start()
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.tm.Prompt*10)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			c.t.Errorf("worker shutdown: %v", err)
		}
	})
	return w
}

func (c *wcase) send(sig *errand.Signature) *errand.AsyncResult {
	c.t.Helper()
	r, err := c.srv.SendTask(c.ctx, sig)
	if err != nil {
		c.t.Fatalf("SendTask(%s): %v", sig.Name, err)
	}
	return r
}

// failure waits for r and returns its failure, failing the case if it
// succeeded.
func (c *wcase) failure(r *errand.AsyncResult, promise string) error {
	c.t.Helper()
	_, err := r.Get(c.ctx)
	if !errors.As(err, new(*errand.TaskError)) {
		c.t.Fatalf("%s promise broken: task %s ended with %v, want FAILURE", promise, r.Signature.Name, err)
	}
	return err
}

func (c *wcase) pathIs(id string, want ...errand.State) {
	c.t.Helper()
	if got := c.rec.path(id); fmt.Sprint(got) != fmt.Sprint(want) {
		c.t.Errorf("states promise broken: task %s went through %v, want %v", id, got, want)
	}
}

// recv waits for a value on ch, failing the case when its ctx ends first.
func (c *wcase) recv(ch <-chan string, what string) string {
	c.t.Helper()
	select {
	case v := <-ch:
		return v
	case <-c.ctx.Done():
		c.t.Fatalf("workflows promise broken: %s never ran", what)
		return ""
	}
}

// runLog records when a task ran.
type runLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (l *runLog) add() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.times = append(l.times, time.Now())
	return len(l.times)
}

func (l *runLog) gaps() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(l.times); i++ {
		out = append(out, l.times[i].Sub(l.times[i-1]))
	}
	return out
}

type point struct {
	X, Y float64
	Tags []string
	Meta map[string]int
}

func taskArgs(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("echo", func(ctx context.Context, n int, s string, xs []uint16, m map[string][]bool, pt point, pp *point) (int, string, []uint16, map[string][]bool, point, *point, error) {
		return n, s, xs, m, pt, pp, nil
	})
	c.start(errand.WorkerConfig{})
	pt := point{X: 1.5, Y: -2, Tags: []string{"a", "é"}, Meta: map[string]int{"k": 3}}
	in := []any{-42, "héllo \"x\"", []uint16{1, 65535}, map[string][]bool{"t": {true, false}}, pt, &pt}
	r := c.send(errand.NewSignature("echo", in...))
	var (
		n  int
		s  string
		xs []uint16
		m  map[string][]bool
		o  point
		op *point
	)
	if err := r.GetInto(c.ctx, &n, &s, &xs, &m, &o, &op); err != nil {
		t.Fatalf("arguments promise broken: %v", err)
	}
	got := fmt.Sprintf("%v|%v|%v|%v|%+v|%+v", n, s, xs, m, o, *op)
	want := fmt.Sprintf("%v|%v|%v|%v|%+v|%+v", in[0], in[1], in[2], in[3], pt, pt)
	if got != want {
		t.Fatalf("arguments promise broken: values came back as %s, sent %s", got, want)
	}
}

// taskHeaders: headers set on a signature (by the caller or by send
// middleware, e.g. W3C trace context) reach the worker's middleware and the
// task through TaskInfo, on every driver, and travel on with a retry.
func taskHeaders(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	seen := make(chan errand.Headers, 2)
	c.register("headers", func(ctx context.Context) (string, error) {
		ti, _ := errand.TaskInfoFrom(ctx)
		seen <- ti.Headers
		if ti.Attempt == 1 {
			return "", errand.RetryLater(0, errors.New("once more, to see the headers travel with the retry"))
		}
		return fmt.Sprint(ti.Headers["traceparent"]), nil
	})
	var mwSaw atomic.Value
	c.start(errand.WorkerConfig{Middleware: []errand.Middleware{func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
			mwSaw.Store(fmt.Sprint(sig.Headers["tenant"]))
			return next(ctx, sig)
		}
	}}})
	sig := errand.NewSignature("headers")
	sig.RetryCount = 1
	const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sig.Headers = errand.Headers{"traceparent": trace, "tenant": "acme", "n": 3}
	r := c.send(sig)
	var got string
	if err := r.GetInto(c.ctx, &got); err != nil || got != trace {
		t.Fatalf("headers promise broken: the task's retry saw traceparent %q (%v); want %q", got, err, trace)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		h := <-seen
		if fmt.Sprint(h["traceparent"]) != trace || fmt.Sprint(h["tenant"]) != "acme" || fmt.Sprint(h["n"]) != "3" {
			t.Fatalf("headers promise broken: attempt %d saw headers %v; want traceparent, tenant and n as sent", attempt, h)
		}
	}
	if v, _ := mwSaw.Load().(string); v != "acme" {
		t.Fatalf("headers promise broken: worker middleware saw tenant %q, want acme", v)
	}
}

func retryFibonacci(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	unit := c.tm.Delay / 3
	var runs runLog
	var attempts []int
	var mu sync.Mutex
	c.register("fails", func(ctx context.Context) error {
		runs.add()
		ti, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		attempts = append(attempts, ti.Attempt)
		mu.Unlock()
		return errors.New("always fails")
	})
	c.start(errand.WorkerConfig{RetryPolicy: errand.Fibonacci{Unit: unit}})
	sig := errand.NewSignature("fails")
	sig.RetryCount = 3
	c.failure(c.send(sig), "retry")
	gaps := runs.gaps()
	if len(gaps) != 3 {
		t.Fatalf("retry promise broken: RetryCount 3 ran the task %d times, want 4", len(gaps)+1)
	}
	for i, mult := range []int{1, 2, 3} {
		if want := time.Duration(mult) * unit; gaps[i] < want {
			t.Errorf("retry promise broken: retry %d came %v after the previous run, before its Fibonacci delay %v (unit %v)", i+1, gaps[i], want, unit)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2 3 4]" {
		t.Errorf("retry promise broken: attempts seen by the task %v, want [1 2 3 4]", attempts)
	}
	c.pathIs(sig.UUID, errand.StatePending,
		errand.StateReceived, errand.StateStarted, errand.StateRetry,
		errand.StateReceived, errand.StateStarted, errand.StateRetry,
		errand.StateReceived, errand.StateStarted, errand.StateRetry,
		errand.StateReceived, errand.StateStarted, errand.StateFailure)
}

func retryPolicy(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	d := c.tm.Delay / 2
	var runs runLog
	c.register("flaky", func() (string, error) {
		if runs.add() < 3 {
			return "", errors.New("transient")
		}
		return "ok", nil
	}, errand.WithRetryPolicy(errand.Fixed(d)))
	c.start(errand.WorkerConfig{RetryPolicy: errand.Fixed(time.Hour)}) // the task's own policy wins
	sig := errand.NewSignature("flaky")
	sig.RetryCount = 5
	var out string
	if err := c.send(sig).GetInto(c.ctx, &out); err != nil || out != "ok" {
		t.Fatalf("retry promise broken: flaky task ended %q, %v; want ok on its third run", out, err)
	}
	for i, g := range runs.gaps() {
		if g < d {
			t.Errorf("retry promise broken: retry %d after %v, before the policy's fixed %v", i+1, g, d)
		}
	}
}

func retryLater(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	d := c.tm.Delay / 2
	var runs runLog
	c.register("later", func() error {
		runs.add()
		return fmt.Errorf("wrapped: %w", errand.RetryLater(d, errors.New("not ready")))
	})
	c.start(errand.WorkerConfig{RetryPolicy: errand.Fixed(0)})
	sig := errand.NewSignature("later")
	sig.RetryCount = 2
	err := c.failure(c.send(sig), "retry-later")
	if !strings.Contains(err.Error(), "not ready") {
		t.Errorf("retry-later failure %q lacks the cause", err)
	}
	gaps := runs.gaps()
	if len(gaps) != 2 {
		t.Fatalf("retry-later promise broken: ran %d times with RetryCount 2, want 3 (retry-later is bounded by the attempt limit)", len(gaps)+1)
	}
	for i, g := range gaps {
		if g < d {
			t.Errorf("retry-later promise broken: retry %d after %v, before the requested %v", i+1, g, d)
		}
	}
}

func retryPermanent(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	var runs runLog
	c.register("perm", func() error { runs.add(); return errand.Permanent(errors.New("invalid order")) })
	c.start(errand.WorkerConfig{RetryPolicy: errand.Fixed(0)})
	sig := errand.NewSignature("perm")
	sig.RetryCount = 5
	c.failure(c.send(sig), "fail-without-retry")
	if n := len(runs.gaps()) + 1; n != 1 {
		t.Fatalf("fail-without-retry promise broken: a permanent error ran the task %d times, want 1", n)
	}
	c.pathIs(sig.UUID, errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateFailure)
}

func registerEcho(c *wcase) {
	join := func(xs ...string) string { return "(" + strings.Join(xs, " ") + ")" }
	c.register("e", func(xs ...string) (string, error) { return join(xs...), nil })
	c.register("pair", func(s string) (string, int, error) { return s, len(s), nil })
	c.register("cb", func(prefix string, rest ...any) (string, error) { return prefix + fmt.Sprint(rest), nil })
}

func chainOrder(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	registerEcho(c)
	c.start(errand.WorkerConfig{})
	imm := errand.NewSignature("e", "x")
	imm.Immutable = true
	golden := []struct {
		tasks []*errand.Signature
		want  string
	}{
		{[]*errand.Signature{errand.NewSignature("e", "a"), errand.NewSignature("e", "b"), errand.NewSignature("e", "c", "d")}, "(c d (b (a)))"},
		{[]*errand.Signature{errand.NewSignature("e", "a"), imm, errand.NewSignature("e", "y")}, "(y (x))"},
	}
	for _, g := range golden {
		chain, _ := errand.NewChain(g.tasks...)
		r, err := c.srv.SendChain(c.ctx, chain)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := r.GetInto(c.ctx, &got); err != nil {
			t.Fatalf("chain: %v", err)
		}
		if got != g.want {
			t.Errorf("workflows promise broken: chain gave %q, want %q (own args first, then the previous results; immutable takes none)", got, g.want)
		}
	}
}

func groupResults(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	registerEcho(c)
	c.start(errand.WorkerConfig{Concurrency: 8})
	var sigs []*errand.Signature
	for i := range 30 {
		sigs = append(sigs, errand.NewSignature("e", fmt.Sprint(i)))
	}
	g, _ := errand.NewGroup(sigs...)
	rs, err := c.srv.SendGroup(c.ctx, g, errand.SendConcurrency(3))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		var got string
		if err := r.GetInto(c.ctx, &got); err != nil || got != fmt.Sprintf("(%d)", i) {
			t.Fatalf("workflows promise broken: group member %d gave %q, %v", i, got, err)
		}
	}
}

func chordOrder(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	registerEcho(c)
	var calls atomic.Int32
	c.register("count", func(xs ...int) (int, error) {
		calls.Add(1)
		for i, x := range xs {
			if x != i*i {
				return 0, errand.Permanent(fmt.Errorf("argument %d is %d, want %d: not in group order", i, x, i*i))
			}
		}
		return len(xs), nil
	})
	c.register("sq", func(i int) (int, error) { return i * i, nil })
	c.start(errand.WorkerConfig{Concurrency: 8})

	// Golden: own args, then each member's results member by member.
	g, _ := errand.NewGroup(errand.NewSignature("pair", "xy"), errand.NewSignature("pair", "abc"))
	ch, _ := errand.NewChord(g, errand.NewSignature("cb", "P"))
	r, err := c.srv.SendChord(c.ctx, ch, errand.SendConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := r.GetInto(c.ctx, &got); err != nil {
		t.Fatal(err)
	}
	if want := "P[xy 2 abc 3]"; got != want {
		t.Errorf("workflows promise broken: chord callback got %q, want %q", got, want)
	}

	const n = 60
	var sigs []*errand.Signature
	for i := range n {
		sigs = append(sigs, errand.NewSignature("sq", i))
	}
	g2, _ := errand.NewGroup(sigs...)
	ch2, _ := errand.NewChord(g2, errand.NewSignature("count"))
	r2, err := c.srv.SendChord(c.ctx, ch2, errand.SendConcurrency(4))
	if err != nil {
		t.Fatal(err)
	}
	var cnt int
	if err := r2.GetInto(c.ctx, &cnt); err != nil || cnt != n {
		t.Fatalf("workflows promise broken: chord of %d: callback gave %d, %v", n, cnt, err)
	}
	if k := calls.Load(); k != 1 {
		t.Fatalf("no double count promise broken: chord callback ran %d times, want once", k)
	}
}

func chordMemberFails(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	registerEcho(c)
	ran := make(chan string, 4)
	c.register("bad", func() (string, error) { return "", errors.New("member exploded") })
	c.register("never", func(xs ...string) error { ran <- "callback"; return nil })
	c.register("onerr", func(msg string) error { ran <- msg; return nil })
	c.start(errand.WorkerConfig{RetryPolicy: errand.Fixed(0)})
	bad := errand.NewSignature("bad")
	bad.RetryCount = 1
	g, _ := errand.NewGroup(errand.NewSignature("e", "a"), bad, errand.NewSignature("e", "c"))
	cb := errand.NewSignature("never")
	cb.OnError = []*errand.Signature{errand.NewSignature("onerr")}
	ch, _ := errand.NewChord(g, cb)
	r, err := c.srv.SendChord(c.ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Get(c.ctx)
	if !errors.As(err, new(*errand.TaskError)) || !strings.Contains(err.Error(), bad.UUID) {
		t.Fatalf("workflows promise broken: chord with a failed member: Get = %v, want FAILURE naming member %s", err, bad.UUID)
	}
	if msg := c.recv(ran, "the chord callback's OnError"); msg == "callback" || !strings.Contains(msg, bad.UUID) || !strings.Contains(msg, "member exploded") {
		t.Fatalf("workflows promise broken: after a member failed, %q ran; want the callback's OnError with the member named", msg)
	}
	c.pathIs(cb.UUID, errand.StatePending, errand.StateFailure)
}

func chordStrays(t testing.TB, p workerPair) {
	// Issue 15: messages naming a chord's group under UUIDs that are not its
	// members, published straight on the broker, must not count toward the
	// chord: counted, they fire it before its members finish.
	c := newWCase(t, p)
	started := make(chan string, 3)
	release := make(chan struct{})
	c.register("hold", func(ctx context.Context, s string) (string, error) {
		started <- s
		select {
		case <-release:
			return s, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	c.register("stray", func() (string, error) { return "stray", nil })
	var calls atomic.Int32
	c.register("gather", func(xs ...string) (string, error) { calls.Add(1); return strings.Join(xs, ","), nil })
	reports := make(chan error, 16)
	c.start(errand.WorkerConfig{Concurrency: 8, ErrorHandler: func(err error) {
		if errors.Is(err, driver.ErrNotMember) {
			select {
			case reports <- err:
			default:
			}
		}
	}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // runs before the worker's shutdown

	g, _ := errand.NewGroup(errand.NewSignature("hold", "a"), errand.NewSignature("hold", "b"), errand.NewSignature("hold", "c"))
	ch, _ := errand.NewChord(g, errand.NewSignature("gather"))
	r, err := c.srv.SendChord(c.ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.recv(started, "a chord member")
	}
	strays := make([]*errand.Signature, 3)
	for i := range strays {
		s := errand.NewSignature("stray")
		s.RoutingKey, s.GroupUUID, s.GroupTaskCount, s.ChordCallback = c.queue, g.GroupUUID, 3, ch.Callback.Copy()
		if err := setOne(c.ctx, c.rec, &errand.TaskState{TaskUUID: s.UUID, TaskName: s.Name, State: errand.StatePending, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		body, err := errand.EncodeSignature(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.broker.Publish(c.ctx, errand.Message{ID: s.UUID, Queue: c.queue, Body: body}); err != nil {
			t.Fatal(err)
		}
		strays[i] = s
	}
	early := make(chan error, 1)
	go func() { _, err := r.Callback.Get(c.ctx); early <- err }()
	for reported := map[string]bool{}; len(reported) < len(strays); {
		select {
		case err := <-reports:
			for _, s := range strays {
				if strings.Contains(err.Error(), s.UUID) && strings.Contains(err.Error(), g.GroupUUID) {
					reported[s.UUID] = true
				}
			}
		case err := <-early:
			t.Fatalf("member-only count promise broken: the chord callback ended (%v) while all 3 members were still running, after 3 stray messages naming group %s under UUIDs that are not its members; a group counts only its own members", err, g.GroupUUID)
		case <-c.ctx.Done():
			t.Fatalf("member-only count promise broken: the worker did not report the 3 stray messages naming group %s; want an error satisfying errors.Is(err, ErrNotMember) naming each stray's UUID and the group", g.GroupUUID)
		}
	}
	unblock()
	var got string
	if err := r.Callback.GetInto(c.ctx, &got); err != nil || got != "a,b,c" {
		t.Fatalf("member-only count promise broken: after 3 strays, the chord callback ended %q, %v; want %q, its members' results in group order", got, err, "a,b,c")
	}
	if k := calls.Load(); k != 1 {
		t.Fatalf("no double count promise broken: the chord callback ran %d times, want once", k)
	}
	for _, s := range strays {
		var out string
		if err := c.srv.Result(s.UUID).GetInto(c.ctx, &out); err != nil || out != "stray" {
			t.Errorf("a stray task's own result is %q, %v; want it recorded like any task's (only its group completion is refused)", out, err)
		}
	}
}

func callbacks(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	got := make(chan string, 4)
	c.register("add", func(a, b int) (int, error) { return a + b, nil })
	c.register("fail", func(x int) error { return errand.Permanent(fmt.Errorf("cannot do %d", x)) })
	c.register("onok", func(tag string, sum int) error { got <- fmt.Sprint("ok ", tag, " ", sum); return nil })
	c.register("onerr", func(msg, tag string) error { got <- "err " + tag + ": " + msg; return nil })
	c.start(errand.WorkerConfig{})
	s := errand.NewSignature("add", 1, 2)
	s.OnSuccess = []*errand.Signature{errand.NewSignature("onok", "A")}
	s.OnError = []*errand.Signature{errand.NewSignature("onerr", "never")}
	c.send(s)
	if m := c.recv(got, "the OnSuccess callback"); m != "ok A 3" {
		t.Fatalf("workflows promise broken: OnSuccess got %q, want %q (own args, then results)", m, "ok A 3")
	}
	f := errand.NewSignature("fail", 7)
	f.OnError = []*errand.Signature{errand.NewSignature("onerr", "B")}
	c.send(f)
	if m := c.recv(got, "the OnError callback"); m != "err B: cannot do 7" {
		t.Fatalf("workflows promise broken: OnError got %q, want %q (error text first, then own args)", m, "err B: cannot do 7")
	}
}

func failurePanic(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("panics", func() error { panic("kaboom " + runID) })
	c.register("ok", func() (string, error) { return "alive", nil })
	c.start(errand.WorkerConfig{})
	err := c.failure(c.send(errand.NewSignature("panics")), "panic")
	if !strings.Contains(err.Error(), "kaboom "+runID) || !strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("bad input promise broken: a panicking task failed with %q; want the panic value and a stack", err)
	}
	var s string
	if err := c.send(errand.NewSignature("ok")).GetInto(c.ctx, &s); err != nil || s != "alive" {
		t.Fatalf("bad input promise broken: worker did not go on after a panic: %v", err)
	}
}

func failureTimeout(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("slow", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	c.start(errand.WorkerConfig{})
	sig := errand.NewSignature("slow")
	sig.Timeout = c.tm.Delay / 3
	err := c.failure(c.send(sig), "timeout")
	if !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Fatalf("timeout promise broken: failure %q does not say the deadline passed", err)
	}
}

// failureUnknown: a task name no worker has is given back (recording
// nothing) until its third delivery, then fails with the name and is set
// aside.
func failureUnknown(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.start(errand.WorkerConfig{UnknownTaskAttempts: 3, MaxErrorBackoff: c.tm.Prompt / 5})
	sig := errand.NewSignature("no.such.task", 1)
	sig.RetryCount = 3
	err := c.failure(c.send(sig), "bad input")
	if !strings.Contains(err.Error(), `"no.such.task"`) || !strings.Contains(err.Error(), "unknown task") {
		t.Fatalf("bad input promise broken: unknown task failed with %q; want the name and 'unknown task'", err)
	}
	if !strings.Contains(err.Error(), "delivery 3") {
		t.Errorf("unknown task promise broken: failed with %q; want it failed on its third delivery (UnknownTaskAttempts 3), given back before", err)
	}
	c.pathIs(sig.UUID, errand.StatePending, errand.StateReceived, errand.StateFailure)
	c.deadLetter(sig.UUID, "unknown task", "unknown task")
}

// deadLetter waits, on a broker that keeps an archive, for message id
// among its entries with a reason containing want.
func (c *wcase) deadLetter(id, want, promise string) {
	c.t.Helper()
	if !c.caps.Archive {
		return
	}
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for {
		dl, err := setAsideOf(c.ctx, c.broker, c.queue)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, m := range dl {
			if m.ID == id && strings.Contains(m.Reason, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s promise broken: message %s is not in the archive with a reason containing %q: %+v", promise, id, want, dl)
		}
		sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
	}
}

func failureBadArgs(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("add", func(a, b int) (int, error) { return a + b, nil })
	c.start(errand.WorkerConfig{})
	for _, bad := range []struct {
		args []any
		want []string
	}{
		{[]any{1, "two"}, []string{`"add"`, "argument 1", "string", "int"}},
		{[]any{1, 2, 3}, []string{`"add"`, "got 3 arguments"}},
	} {
		sig := errand.NewSignature("add", bad.args...)
		sig.RetryCount = 3
		err := c.failure(c.send(sig), "bad input")
		for _, w := range bad.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("bad input promise broken: failure %q lacks %q", err, w)
			}
		}
		c.pathIs(sig.UUID, errand.StatePending, errand.StateReceived, errand.StateFailure)
	}
}

// failureKinds: each kind of failure reaches the producer through the
// backend, testable with errors.Is and errors.As (TaskState.ErrorKind and
// ErrorDetail stored and read back like Error).
func failureKinds(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("add", func(a, b int) (int, error) { return a + b, nil })
	c.register("panics", func() error { panic("kaboom " + runID) })
	c.register("perm", func() error { return errand.Permanent(errors.New("invalid order")) })
	c.register("slow", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	c.register("flaky", func() error { return errors.New("still broken") })
	c.start(errand.WorkerConfig{UnknownTaskAttempts: 1, RetryPolicy: errand.Fixed(0)})
	const promise = "error kinds (a failure's kind reaches the producer through the backend)"
	kind := func(err error, want errand.ErrorKind) {
		t.Helper()
		var te *errand.TaskError
		if errors.As(err, &te) && te.Kind != want {
			t.Errorf("%s promise broken: TaskError.Kind read back as %q, want %q (failure %q)", promise, te.Kind, want, err)
		}
	}

	err := c.failure(c.send(errand.NewSignature("no.such.task")), promise)
	kind(err, errand.KindUnknownTask)
	if !errors.Is(err, errand.ErrUnknownTask) {
		t.Errorf("%s promise broken: unknown task's error %q does not satisfy errors.Is(err, ErrUnknownTask)", promise, err)
	}

	err = c.failure(c.send(errand.NewSignature("add", 1, "two")), promise)
	kind(err, errand.KindBadArguments)
	var argErr *errand.ArgumentError
	if !errors.Is(err, errand.ErrBadArguments) || !errors.As(err, &argErr) ||
		argErr.TaskName != "add" || argErr.Index != 1 || argErr.Got != "string" || argErr.Want != "int" {
		t.Errorf("%s promise broken: bad arguments' error %q: want errors.Is ErrBadArguments and an *ArgumentError{add, 1, string, int}, got %+v", promise, err, argErr)
	}

	err = c.failure(c.send(errand.NewSignature("panics")), promise)
	kind(err, errand.KindPanic)
	var pe *errand.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom "+runID || !strings.Contains(pe.Stack, "goroutine") {
		t.Errorf("%s promise broken: panic's error %q is not a *PanicError with the value and the stack", promise, err)
	}

	perm := errand.NewSignature("perm")
	perm.RetryCount = 3
	err = c.failure(c.send(perm), promise)
	kind(err, errand.KindPermanent)
	var pm *errand.PermanentError
	if !errors.As(err, &pm) || pm.Error() != "invalid order" {
		t.Errorf("%s promise broken: permanent failure's error %q is not a *PermanentError with its text", promise, err)
	}

	slow := errand.NewSignature("slow")
	slow.Timeout = c.tm.Delay / 3
	err = c.failure(c.send(slow), promise)
	kind(err, errand.KindTimeout)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s promise broken: a task timeout's error %q does not satisfy errors.Is(err, context.DeadlineExceeded)", promise, err)
	}

	flaky := errand.NewSignature("flaky")
	flaky.RetryCount = 1
	err = c.failure(c.send(flaky), promise)
	kind(err, errand.KindRetriesExhausted)
	if !errors.Is(err, errand.ErrRetriesExhausted) || !strings.HasSuffix(err.Error(), ": still broken") {
		t.Errorf("%s promise broken: retries exhausted gave %q; want errors.Is(err, ErrRetriesExhausted) and the last error's text", promise, err)
	}
}

func badMessageWorker(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("ok", func() (string, error) { return "alive", nil })
	c.start(errand.WorkerConfig{})
	garbage := errand.Message{ID: runID + "-garbage", Queue: c.queue, Body: []byte("{\"UUID\": 12, broken")}
	if err := c.broker.Publish(c.ctx, garbage); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := c.send(errand.NewSignature("ok")).GetInto(c.ctx, &s); err != nil || s != "alive" {
		t.Fatalf("bad input promise broken: worker did not go on after a malformed message: %v", err)
	}
	if !p.broker.Caps.Archive {
		return
	}
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for {
		dl, err := setAsideOf(c.ctx, c.broker, c.queue)
		if err != nil {
			t.Fatal(err)
		}
		if len(dl) == 1 && dl[0].ID == garbage.ID && strings.Contains(dl[0].Reason, "malformed") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bad input promise broken: the malformed message is not in the archive with its reason: %+v", dl)
		}
		sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
	}
}

// forgedUUID: while a task runs, two messages carrying its UUID are put
// straight on the queue — one with another task name, one with the same
// name and other arguments (the broker's first delivery of a second
// message, not a redelivery). Neither may run as the task or touch its
// result: both are set aside, reported with ErrUUIDConflict.
func forgedUUID(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	ran := make(chan string, 4)
	var realRuns atomic.Int32
	c.register("slow", func(ctx context.Context, tag string) (string, error) {
		if tag != "real" {
			ran <- "slow(" + tag + ")"
			return "forged " + tag, nil
		}
		realRuns.Add(1)
		started <- struct{}{}
		select {
		case <-release:
			return "real", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	c.register("other", func(tag string) (string, error) { ran <- "other(" + tag + ")"; return "forged " + tag, nil })
	conflicts := make(chan error, 4)
	c.start(errand.WorkerConfig{ErrorHandler: func(err error) {
		if errors.Is(err, errand.ErrUUIDConflict) {
			conflicts <- err
		}
	}})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	c.t.Cleanup(free) // before the worker's shutdown, should the case fail first
	real := errand.NewSignature("slow", "real")
	r := c.send(real)
	select {
	case <-started:
	case <-c.ctx.Done():
		t.Fatalf("delivery promise broken: the real task never started")
	}
	var forged []string
	for i, f := range []*errand.Signature{
		{UUID: real.UUID, Name: "other", RoutingKey: c.queue, Args: []errand.Arg{errand.ArgOf("other-name")}},
		{UUID: real.UUID, Name: "slow", RoutingKey: c.queue, Args: []errand.Arg{errand.ArgOf("same-name")}},
	} {
		body, err := errand.EncodeSignature(f)
		if err != nil {
			t.Fatal(err)
		}
		m := errand.Message{ID: fmt.Sprintf("%s-forged-%d-%d", runID, seq.Add(1), i), Queue: c.queue, Body: body}
		if err := c.broker.Publish(c.ctx, m); err != nil {
			t.Fatal(err)
		}
		forged = append(forged, m.ID)
	}
	for range forged {
		select {
		case <-conflicts:
		case what := <-ran:
			t.Fatalf("bad input promise broken: a message reusing the UUID of a running task ran as that task: %s (a delivery whose UUID belongs to another task name, or to a task STARTED under another delivery's lease, must be set aside)", what)
		case <-c.ctx.Done():
			t.Fatalf("bad input promise broken: the messages reusing a running task's UUID were never set aside with ErrUUIDConflict")
		}
	}
	if st, err := r.State(c.ctx); err != nil || st.State != errand.StateStarted {
		t.Fatalf("bad input promise broken: while the real task runs its state is %+v, %v; want STARTED, untouched by the forged messages", st, err)
	}
	free()
	var out string
	if err := r.GetInto(c.ctx, &out); err != nil || out != "real" {
		t.Fatalf("bad input promise broken: the real task's result is %q, %v; want %q, not a forged message's", out, err, "real")
	}
	if n := realRuns.Load(); n != 1 {
		t.Errorf("bad input promise broken: the real task ran %d times, want once", n)
	}
	for _, id := range forged {
		c.deadLetter(id, "UUID", "bad input")
	}
}

// foreignBytes: bytes errand never wrote — garbage, truncated JSON, JSON
// of the wrong shape, nothing at all — are put on the queue through the
// service's raw path (BrokerHarness.PushRaw) while a worker runs. Nothing
// vanishes: the worker goes on, its ErrorHandler hears of each payload
// once, each is set aside (in the archive with a reason, where the
// broker keeps one) and none is delivered again.
func foreignBytes(t testing.TB, p workerPair) {
	if p.broker.PushRaw == nil {
		t.Logf("BadMessage/ForeignBytes: checked nothing: the harness gives no PushRaw, so the kit has no raw path into this driver's queues (set BrokerHarness.PushRaw to check that foreign bytes never vanish)")
		return
	}
	const promise = "nothing vanishes (foreign bytes on a queue are set aside with a reason and reported, never dropped)"
	c := newWCase(t, p)
	c.register("ok", func() (string, error) { return "alive", nil })
	var mu sync.Mutex
	var reports []error
	c.start(errand.WorkerConfig{ErrorHandler: func(err error) {
		if errors.Is(err, errand.ErrBadMessage) {
			mu.Lock()
			reports = append(reports, err)
			mu.Unlock()
		}
	}})
	reported := func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), reports...)
	}
	tag := fmt.Sprintf("%s-%d", runID, seq.Add(1))
	var pushed [][]byte
	for _, raw := range [][]byte{
		[]byte("garbage " + tag + " ~!@#$%^&*( not json at all"),
		[]byte(`{"UUID": "` + tag + `", "Name": "ok", "Args": [`),
		[]byte(`{"hello": "` + tag + `", "n": [1, 2, 3]}`),
		{},
	} {
		if !p.broker.PushRaw(t, c.broker, c.queue, raw) {
			t.Logf("BadMessage/ForeignBytes: the service refuses the payload %q; not pushed", raw)
			continue
		}
		pushed = append(pushed, raw)
	}
	if len(pushed) == 0 {
		t.Fatalf("%s: PushRaw pushed none of the foreign payloads; a harness that sets PushRaw must push at least the non-empty ones", promise)
	}
	var s string
	if err := c.send(errand.NewSignature("ok")).GetInto(c.ctx, &s); err != nil || s != "alive" {
		t.Fatalf("%s promise broken: the worker did not go on after foreign bytes on its queue: %q, %v", promise, s, err)
	}
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for len(reported()) < len(pushed) {
		if time.Now().After(deadline) {
			r := reported()
			t.Fatalf("%s promise broken: %d foreign payloads were pushed but the worker's ErrorHandler heard of %d bad messages (%v); each must be set aside and reported", promise, len(pushed), len(r), r)
		}
		sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
	}
	if c.caps.Archive {
		for {
			dl, err := setAsideOf(c.ctx, c.broker, c.queue)
			if err != nil {
				t.Fatal(err)
			}
			var missing [][]byte
			for _, raw := range pushed {
				found := false
				for _, d := range dl {
					if bytes.Equal(d.Body, raw) && d.Reason != "" {
						found = true
						break
					}
				}
				if !found {
					missing = append(missing, raw)
				}
			}
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s promise broken: foreign payloads %q are not in the archive with their bytes and a reason; archive: %+v", promise, missing, dl)
			}
			sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
		}
	}
	// Set aside means gone from the queue: a lease after its last
	// delivery, a payload rejected but kept (or released) would have been
	// delivered, and reported, again.
	sleepUntil(c.ctx, time.Now().Add(c.lease+c.tm.Prompt))
	if r := reported(); len(r) != len(pushed) {
		t.Errorf("%s promise broken: %d foreign payloads were pushed and, a lease later, the ErrorHandler has heard of %d bad messages: a payload set aside was delivered again (%v)", promise, len(pushed), len(r), r)
	}
}

func crashedWorker(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	c.register("add", func(a, b int) (int, error) { return a + b, nil })
	const n = 5
	var rs []*errand.AsyncResult
	for i := range n {
		rs = append(rs, c.send(errand.NewSignature("add", i, i)))
	}
	// A consumer takes the tasks and dies without settling or extending.
	var taken int
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for taken < n && time.Now().Before(deadline) {
		fctx, cancel := context.WithDeadline(c.ctx, deadline)
		ds, _ := c.broker.Fetch(fctx, c.queue, n-taken, c.tm.Lease)
		cancel()
		taken += len(ds)
	}
	if taken != n {
		t.Fatalf("the crashing consumer took %d of %d tasks", taken, n)
	}
	c.start(errand.WorkerConfig{})
	for i, r := range rs {
		var sum int
		if err := r.GetInto(c.ctx, &sum); err != nil || sum != 2*i {
			t.Fatalf("at-least-once promise broken: task %d of a crashed consumer ended %d, %v; want %d", i, sum, err, 2*i)
		}
	}
}

func shutdownReleases(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	started := make(chan struct{}, 1)
	var runs atomic.Int32
	c.register("long", func(ctx context.Context) (string, error) {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "finished elsewhere", nil
	})
	w1 := c.srv.NewWorker(errand.WorkerConfig{Lease: time.Hour, Concurrency: 2})
	w1.Start()
	r := c.send(errand.NewSignature("long"))
	select {
	case <-started:
	case <-c.ctx.Done():
		t.Fatalf("delivery promise broken: the task never started")
	}
	sctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt/10)
	defer cancel()
	if err := w1.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded: the task outlived the shutdown timeout", err)
	}
	// The released task must reach a second worker long before the hour-long lease.
	c.start(errand.WorkerConfig{})
	var out string
	if err := r.GetInto(c.ctx, &out); err != nil || out != "finished elsewhere" {
		t.Fatalf("shutdown promise broken: the task a worker gave back on shutdown ended %q, %v; want another worker to finish it", out, err)
	}
}

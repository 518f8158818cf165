package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"time"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Queue to consume. Default: the server's default queue.
	Queue string
	// Concurrency is how many tasks run at once; the worker never fetches
	// more than it has free slots for. Default: 10.
	Concurrency int
	// Lease is how long a fetched delivery stays invisible to other
	// consumers. While a task runs its lease is extended every
	// ExtendEvery, so Lease only bounds how long a crashed worker's tasks
	// wait before redelivery. Default: 30s.
	Lease time.Duration
	// ExtendEvery is how often a running task's lease is extended.
	// Default: Lease/3.
	ExtendEvery time.Duration
	// TaskTimeout bounds one attempt of every task without its own
	// Signature.Timeout: the task's ctx is cancelled after it. Default: none.
	TaskTimeout time.Duration
	// ShutdownTimeout is how long Run waits for running tasks after its ctx
	// is done, before cancelling them and releasing their deliveries.
	// Default: 30s.
	ShutdownTimeout time.Duration
	// RetryPolicy chooses retry delays for tasks registered without their
	// own. Default: Fibonacci{Unit: time.Second} (machinery's).
	RetryPolicy RetryPolicy
	// ErrorBackoff is how long a delivery waits before redelivery when the
	// backend or broker failed while it was handled, and how long the loop
	// waits after a failed Fetch. Default: 1s.
	ErrorBackoff time.Duration
	// PreTaskHook, if set, runs before each task's function.
	PreTaskHook func(ctx context.Context, sig *Signature)
	// PostTaskHook, if set, runs after each task's function with the state
	// it ended in (SUCCESS, RETRY or FAILURE).
	PostTaskHook func(ctx context.Context, sig *Signature, st *TaskState)
	// ErrorHandler, if set, receives every error the worker cannot return to
	// anyone: task failures, and broker or backend errors of the loop.
	ErrorHandler func(err error)
	// Logger receives the worker's warnings. Default: the server's.
	Logger *slog.Logger
}

// Worker consumes one queue: it fetches deliveries, runs their tasks and
// records the outcome. Create it with Server.NewWorker.
type Worker struct {
	srv *Server
	cfg WorkerConfig
	log *slog.Logger

	slots   chan struct{}
	work    chan *Delivery // fetched deliveries, to the runners
	runners sync.WaitGroup // Concurrency long-lived goroutines running tasks

	startOnce sync.Once
	stopFetch context.CancelFunc
	fetchCtx  context.Context
	hardCtx   context.Context // cancelled when shutdown gives up waiting
	hardStop  context.CancelFunc
	loopDone  chan struct{}
	tasks     sync.WaitGroup
}

// NewWorker returns a worker for cfg. It does nothing until Start or Run.
func (s *Server) NewWorker(cfg WorkerConfig) *Worker {
	if cfg.Queue == "" {
		cfg.Queue = s.cfg.DefaultQueue
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 10
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.ExtendEvery <= 0 || cfg.ExtendEvery >= cfg.Lease {
		cfg.ExtendEvery = cfg.Lease / 3
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = Fibonacci{Unit: time.Second}
	}
	if cfg.ErrorBackoff <= 0 {
		cfg.ErrorBackoff = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = s.log
	}
	w := &Worker{srv: s, cfg: cfg, log: log, slots: make(chan struct{}, cfg.Concurrency),
		work: make(chan *Delivery, cfg.Concurrency), loopDone: make(chan struct{})}
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	w.hardCtx, w.hardStop = context.WithCancel(context.Background())
	return w
}

// Start begins fetching in the background. Calling it again does nothing.
// Tasks run on Concurrency long-lived goroutines (their stacks, once grown,
// are kept across tasks).
func (w *Worker) Start() {
	w.startOnce.Do(func() {
		for range w.cfg.Concurrency {
			w.runners.Go(func() {
				for d := range w.work {
					w.handle(d)
				}
			})
		}
		go w.loop()
	})
}

// Run starts the worker and blocks until ctx is done, then shuts down
// gracefully within ShutdownTimeout. It returns nil after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	w.Start()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	return w.Shutdown(sctx)
}

// Shutdown stops fetching, then waits for running tasks. If ctx is done
// first, it cancels the tasks' contexts and, as each returns, releases its
// delivery back to the broker unrecorded so another worker runs it; it
// returns ctx.Err() once they have all returned. Task functions must honour
// their ctx for this to be prompt. Like http.Server.Shutdown, it may be
// called once; a worker never started shuts down at once.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.Start() // so loopDone closes even for a worker never started
	w.stopFetch()
	<-w.loopDone
	done := make(chan struct{})
	go func() {
		w.tasks.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	w.hardStop()
	<-done
	w.runners.Wait() // the loop closed w.work; runners return once it is drained
	return err
}

func (w *Worker) report(err error, msg string, attrs ...any) {
	w.log.Warn(msg, append(attrs, "err", err)...)
	if w.cfg.ErrorHandler != nil {
		w.cfg.ErrorHandler(err)
	}
}

// loop fetches as many deliveries as there are free slots and hands each to
// its own goroutine.
func (w *Worker) loop() {
	defer close(w.loopDone)
	defer close(w.work)
	b := w.srv.cfg.Broker
	for {
		select {
		case w.slots <- struct{}{}:
		case <-w.fetchCtx.Done():
			return
		}
		n := 1
	more:
		for n < w.cfg.Concurrency {
			select {
			case w.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		ds, err := b.Fetch(w.fetchCtx, w.cfg.Queue, n, w.cfg.Lease)
		for range n - len(ds) {
			<-w.slots
		}
		for _, d := range ds {
			w.tasks.Add(1)
			w.work <- d // never blocks: a slot is held for each delivery
		}
		if err != nil {
			if w.fetchCtx.Err() != nil {
				return
			}
			w.report(err, "errand: fetch failed", "queue", w.cfg.Queue)
			if errors.Is(err, ErrClosed) {
				return
			}
			t := time.NewTimer(w.cfg.ErrorBackoff)
			select {
			case <-t.C:
			case <-w.fetchCtx.Done():
				t.Stop()
				return
			}
		}
	}
}

// settle is how a handled delivery leaves the worker.
type settle int

const (
	ack     settle = iota // done: remove it
	requeue               // something failed: deliver again after ErrorBackoff
	release               // shutdown: deliver again at once
)

func (w *Worker) handle(d *Delivery) {
	defer w.tasks.Done()
	defer func() { <-w.slots }()
	ctx := context.WithoutCancel(w.hardCtx)

	sig, err := DecodeSignature(d.Body)
	if err != nil {
		reason := fmt.Sprintf("%v (message %q on queue %q)", err, d.ID, d.Queue)
		if rerr := w.srv.cfg.Broker.Reject(ctx, d, reason); rerr != nil {
			w.report(rerr, "errand: reject malformed message", "message", d.ID)
		}
		w.report(fmt.Errorf("errand: set aside: %s", reason), "errand: malformed message set aside", "message", d.ID)
		return
	}

	stopExtend := w.extendLease(d)
	outcome, err := w.process(ctx, sig)
	stopExtend()
	b := w.srv.cfg.Broker
	switch outcome {
	case ack:
		err = b.Ack(ctx, d)
		if err != nil {
			w.report(err, "errand: ack", "task", sig.Name, "uuid", sig.UUID)
		}
	case requeue:
		w.report(err, "errand: task requeued after an error", "task", sig.Name, "uuid", sig.UUID)
		if rerr := b.Release(ctx, d, time.Now().Add(w.cfg.ErrorBackoff)); rerr != nil {
			w.report(rerr, "errand: release", "task", sig.Name, "uuid", sig.UUID)
		}
	case release:
		if rerr := b.Release(ctx, d, time.Time{}); rerr != nil {
			w.report(rerr, "errand: release on shutdown", "task", sig.Name, "uuid", sig.UUID)
		}
	}
}

// extendLease renews d's lease every ExtendEvery until the returned func is
// called; the func returns once the extender has stopped.
func (w *Worker) extendLease(d *Delivery) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.ExtendEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), w.cfg.ExtendEvery)
				err := w.srv.cfg.Broker.Extend(ctx, d, w.cfg.Lease)
				cancel()
				if err != nil {
					w.report(err, "errand: extend lease", "message", d.ID)
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// process runs one decoded task through its states and returns how to
// settle its delivery.
func (w *Worker) process(ctx context.Context, sig *Signature) (settle, error) {
	be := w.srv.cfg.Backend
	prev, err := be.GetState(ctx, sig.UUID)
	switch {
	case errors.Is(err, ErrTaskNotFound):
		prev = nil
	case err != nil:
		return requeue, fmt.Errorf("errand: task %s (%s): read state: %w", sig.Name, sig.UUID, err)
	}
	if prev != nil {
		// A redelivery of work already recorded: finish what the crashed
		// or stale attempt left (callbacks are idempotent by UUID), never
		// run the function again.
		switch {
		case prev.State == StateSuccess:
			return w.afterSuccess(ctx, sig, prev.Results)
		case prev.State == StateFailure:
			return w.afterFailure(ctx, sig, prev.Error)
		case prev.State == StateRetry && prev.Attempt > sig.attempt():
			return w.scheduleRetry(ctx, sig, errors.New(prev.Error), nil, prev)
		case prev.Attempt > sig.attempt():
			return ack, nil // a later attempt owns the task
		}
	}
	st := &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, Attempt: sig.attempt(), CreatedAt: time.Now().UTC()}
	if prev != nil {
		st.CreatedAt = prev.CreatedAt
	}
	st.State = StateReceived

	// Find the function and decode the arguments before writing anything,
	// so a cannotRun task records RECEIVED and STARTED in one round trip.
	var cannotRun error
	tk := w.srv.task(sig.Name)
	var args []reflect.Value
	if tk == nil {
		cannotRun = fmt.Errorf("%w %q (task %s): no function is registered under that name on this worker", ErrUnknownTask, sig.Name, sig.UUID)
	} else {
		args, cannotRun = tk.decodeArgs(sig.Args)
	}
	if cannotRun != nil {
		if err := be.SetState(ctx, st); err != nil {
			return requeue, fmt.Errorf("errand: task %s (%s): set RECEIVED: %w", sig.Name, sig.UUID, err)
		}
		return w.fail(ctx, sig, st, cannotRun)
	}

	tctx, cancel := w.taskContext(sig)
	defer cancel()
	if w.cfg.PreTaskHook != nil {
		w.cfg.PreTaskHook(tctx, sig)
	}
	started := st.Copy()
	started.State, started.StartedAt = StateStarted, time.Now().UTC()
	if err := w.setStates(ctx, st, started); err != nil {
		return requeue, fmt.Errorf("errand: task %s (%s): set RECEIVED, STARTED: %w", sig.Name, sig.UUID, err)
	}
	st = started
	results, runErr := safeCall(tctx, tk, args)
	if runErr != nil && w.hardCtx.Err() != nil {
		// Shutdown gave up waiting and cancelled the task: give it back
		// unrecorded so another worker runs it.
		return release, nil
	}
	var outcome settle
	if runErr == nil {
		st = st.Copy()
		st.State, st.Results, st.FinishedAt = StateSuccess, results, time.Now().UTC()
		if err := be.SetState(ctx, st); err != nil {
			return requeue, fmt.Errorf("errand: task %s (%s): set SUCCESS: %w", sig.Name, sig.UUID, err)
		}
		outcome, err = w.afterSuccess(ctx, sig, results)
	} else {
		policy := tk.policy
		if policy == nil {
			policy = w.cfg.RetryPolicy
		}
		outcome, err = w.scheduleRetry(ctx, sig, runErr, policy, st)
		st, _ = be.GetState(ctx, sig.UUID)
	}
	if w.cfg.PostTaskHook != nil && st != nil {
		w.cfg.PostTaskHook(tctx, sig, st)
	}
	return outcome, err
}

// setStates writes sts in order, in one call where the backend batches.
func (w *Worker) setStates(ctx context.Context, sts ...*TaskState) error {
	be := w.srv.cfg.Backend
	if sb, ok := be.(StateBatcher); ok {
		return sb.SetStates(ctx, sts)
	}
	for _, st := range sts {
		if err := be.SetState(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) taskContext(sig *Signature) (context.Context, context.CancelFunc) {
	ctx := withTaskInfo(w.hardCtx, sig)
	timeout := sig.Timeout
	if timeout <= 0 {
		timeout = w.cfg.TaskTimeout
	}
	cancels := []context.CancelFunc{}
	if timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, timeout)
		cancels = append(cancels, c)
	}
	if sig.Deadline != nil {
		var c context.CancelFunc
		ctx, c = context.WithDeadline(ctx, *sig.Deadline)
		cancels = append(cancels, c)
	}
	return ctx, func() {
		for _, c := range cancels {
			c()
		}
	}
}

// safeCall runs the task, turning a panic into a *PanicError with the stack.
func safeCall(ctx context.Context, tk *task, args []reflect.Value) (results []Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: string(debug.Stack())}
		}
	}()
	return tk.call(ctx, args)
}

// scheduleRetry retries sig after runErr if the error and the attempt count
// allow it, else fails it for good. With a nil policy (resuming a RETRY
// recorded by a crashed worker) the delay is zero.
func (w *Worker) scheduleRetry(ctx context.Context, sig *Signature, runErr error, policy RetryPolicy, st *TaskState) (settle, error) {
	var perm *PermanentError
	var argErr *ArgumentError
	if errors.As(runErr, &perm) || errors.As(runErr, &argErr) || sig.attempt() > sig.RetryCount {
		return w.fail(ctx, sig, st, runErr)
	}
	next := sig.Copy()
	next.Attempt = sig.attempt() + 1
	next.RetryTimeout = FibonacciNext(sig.RetryTimeout)
	var delay time.Duration
	var later *RetryLaterError
	switch {
	case errors.As(runErr, &later):
		delay = later.Delay
	case policy != nil:
		delay = policy.RetryDelay(next, runErr)
	}
	eta := time.Now().Add(max(delay, 0))
	if sig.Deadline != nil && eta.After(*sig.Deadline) {
		return w.fail(ctx, sig, st, fmt.Errorf("%w (no retry: deadline %s passed)", runErr, sig.Deadline.Format(time.RFC3339Nano)))
	}
	next.ETA = &eta
	if st.State != StateRetry {
		st = st.Copy()
		st.State, st.Error, st.Attempt = StateRetry, runErr.Error(), next.Attempt
		if err := w.srv.cfg.Backend.SetState(ctx, st); err != nil {
			return requeue, fmt.Errorf("errand: task %s (%s): set RETRY: %w", sig.Name, sig.UUID, err)
		}
	}
	if err := w.srv.publish(ctx, next); err != nil {
		return requeue, fmt.Errorf("errand: task %s (%s): publish retry: %w", sig.Name, sig.UUID, err)
	}
	return ack, nil
}

// fail records FAILURE for sig and runs what follows a failure.
func (w *Worker) fail(ctx context.Context, sig *Signature, st *TaskState, cause error) (settle, error) {
	st = st.Copy()
	st.State, st.Error, st.FinishedAt = StateFailure, cause.Error(), time.Now().UTC()
	if err := w.srv.cfg.Backend.SetState(ctx, st); err != nil {
		return requeue, fmt.Errorf("errand: task %s (%s): set FAILURE: %w", sig.Name, sig.UUID, err)
	}
	w.report(fmt.Errorf("errand: task %s (%s) failed: %w", sig.Name, sig.UUID, cause), "errand: task failed", "task", sig.Name, "uuid", sig.UUID)
	return w.afterFailure(ctx, sig, st.Error)
}

// afterSuccess completes sig's group (firing its chord) and sends its
// OnSuccess callbacks with its results appended. Every step is idempotent,
// so a redelivery repeats it safely.
func (w *Worker) afterSuccess(ctx context.Context, sig *Signature, results []Result) (settle, error) {
	if err := w.completeMember(ctx, sig); err != nil {
		return requeue, err
	}
	cbs := make([]*Signature, 0, len(sig.OnSuccess))
	for _, cb := range sig.OnSuccess {
		cb = cb.Copy()
		if !cb.Immutable {
			cb.Args = append(cb.Args, resultArgs(results)...)
		}
		cbs = append(cbs, cb)
	}
	if err := w.sendCallbacks(ctx, cbs); err != nil {
		return requeue, fmt.Errorf("errand: task %s (%s): send OnSuccess callbacks: %w", sig.Name, sig.UUID, err)
	}
	return ack, nil
}

// afterFailure completes sig's group (a chord then fails) and sends its
// OnError callbacks with the error text as their first argument.
func (w *Worker) afterFailure(ctx context.Context, sig *Signature, errText string) (settle, error) {
	if err := w.completeMember(ctx, sig); err != nil {
		return requeue, err
	}
	if err := w.sendCallbacks(ctx, errorCallbacks(sig.OnError, errText)); err != nil {
		return requeue, fmt.Errorf("errand: task %s (%s): send OnError callbacks: %w", sig.Name, sig.UUID, err)
	}
	return ack, nil
}

// sendCallbacks publishes callbacks, first recording PENDING for each that
// has no state yet (chain members and chord callbacks were made PENDING when
// sent; a redelivered parent must not set a running callback back).
func (w *Worker) sendCallbacks(ctx context.Context, cbs []*Signature) error {
	for _, cb := range cbs {
		_, err := w.srv.cfg.Backend.GetState(ctx, cb.UUID)
		switch {
		case errors.Is(err, ErrTaskNotFound):
			if err := w.srv.setPending(ctx, cb); err != nil {
				return err
			}
		case err != nil:
			return err
		}
	}
	return w.srv.publish(ctx, cbs...)
}

func errorCallbacks(sigs []*Signature, errText string) []*Signature {
	out := make([]*Signature, 0, len(sigs))
	for _, cb := range sigs {
		cb = cb.Copy()
		cb.Args = append([]Arg{{Type: "string", Value: errText}}, cb.Args...)
		out = append(out, cb)
	}
	return out
}

// completeMember counts sig done in its chord's group and, if it completed
// the group and wins the claim, fires the chord.
func (w *Worker) completeMember(ctx context.Context, sig *Signature) error {
	if sig.GroupUUID == "" || sig.ChordCallback == nil {
		return nil
	}
	be := w.srv.cfg.Backend
	done, total, err := be.CompleteGroupMember(ctx, sig.GroupUUID, sig.UUID)
	if errors.Is(err, ErrGroupNotFound) {
		// The group's metadata expired or was evicted: the chord can never
		// complete. Say so on the callback instead of retrying forever.
		return w.failChord(ctx, sig.ChordCallback.Copy(), fmt.Sprintf("chord group %s is gone from the backend (expired or evicted): its callback cannot run", sig.GroupUUID))
	}
	if err != nil {
		return fmt.Errorf("errand: task %s (%s): complete group member: %w", sig.Name, sig.UUID, err)
	}
	if done < total {
		return nil
	}
	won, err := be.ClaimChord(ctx, sig.GroupUUID, sig.UUID)
	if err != nil {
		return fmt.Errorf("errand: group %s: claim chord: %w", sig.GroupUUID, err)
	}
	if !won {
		return nil
	}
	return w.fireChord(ctx, sig)
}

// fireChord reads every member's state once and sends the callback with
// their results in group order, or, if a member failed, marks the callback
// FAILURE and sends its OnError callbacks instead.
func (w *Worker) fireChord(ctx context.Context, member *Signature) error {
	be := w.srv.cfg.Backend
	cb := member.ChordCallback.Copy()
	states, err := be.GroupStates(ctx, member.GroupUUID)
	if err != nil {
		return fmt.Errorf("errand: group %s: read member states: %w", member.GroupUUID, err)
	}
	var args []Arg
	for i, st := range states {
		if st.State != StateSuccess {
			return w.failChord(ctx, cb, fmt.Sprintf("chord member %d, task %s (%s), ended %s: %s", i, st.TaskName, st.TaskUUID, st.State, st.Error))
		}
		args = append(args, resultArgs(st.Results)...)
	}
	if !cb.Immutable {
		cb.Args = append(cb.Args, args...)
	}
	if err := w.sendCallbacks(ctx, []*Signature{cb}); err != nil {
		return fmt.Errorf("errand: group %s: send chord callback: %w", member.GroupUUID, err)
	}
	return nil
}

func (w *Worker) failChord(ctx context.Context, cb *Signature, errText string) error {
	be := w.srv.cfg.Backend
	prev, err := be.GetState(ctx, cb.UUID)
	if err != nil && !errors.Is(err, ErrTaskNotFound) {
		return fmt.Errorf("errand: chord callback %s: read state: %w", cb.UUID, err)
	}
	if prev == nil || !prev.State.Terminal() {
		st := &TaskState{TaskUUID: cb.UUID, TaskName: cb.Name, State: StateFailure, Attempt: cb.attempt(),
			Error: errText, CreatedAt: time.Now().UTC(), FinishedAt: time.Now().UTC()}
		if prev != nil {
			st.CreatedAt = prev.CreatedAt
		}
		if err := be.SetState(ctx, st); err != nil {
			return fmt.Errorf("errand: chord callback %s: set FAILURE: %w", cb.UUID, err)
		}
	}
	if err := w.sendCallbacks(ctx, errorCallbacks(cb.OnError, errText)); err != nil {
		return fmt.Errorf("errand: chord callback %s: send OnError callbacks: %w", cb.UUID, err)
	}
	return nil
}

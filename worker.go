package errand

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
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
	// MaxErrorBackoff caps the fetch loop's backoff after consecutive failed
	// fetches. Default: 30s.
	MaxErrorBackoff time.Duration
	// MaxRetries caps the RetryCount of every task this worker runs: a
	// signature asking for more retries gets MaxRetries (a message is input,
	// and a RetryCount of a billion must not keep a task cycling for ever).
	// Default (0): 100. Negative: no retries at all.
	MaxRetries int
	// UnknownTaskAttempts bounds how many deliveries of a task whose name
	// this worker has no function for are given back. Default: 10.
	UnknownTaskAttempts int
	// MaxMessageSize is the largest delivery body the worker decodes.
	// Default: the broker's Limits().MaxPayload, else 16 MiB.
	MaxMessageSize int
	// CallTimeout bounds each step of handling a delivery that calls the
	// broker or backend (recording states, sending callbacks and retries,
	// acking or releasing), so a server that stops answering holds a slot
	// no longer than this: the step fails and the delivery is redelivered.
	// Default: 10s.
	CallTimeout time.Duration
	// PreTaskHook, if set, runs before each task's function.
	PreTaskHook func(ctx context.Context, sig *Signature)
	// PostTaskHook, if set, runs after each task's function with the state
	// it ended in (SUCCESS, RETRY or FAILURE), once that state is recorded.
	PostTaskHook func(ctx context.Context, sig *Signature, st *TaskState)
	// ErrorHandler, if set, receives every error the worker cannot return to
	// anyone: task failures, and broker or backend errors of the loop.
	ErrorHandler func(err error)
	// Logger receives the worker's warnings. Default: the server's.
	Logger *slog.Logger
}

// DefaultMaxRetries is WorkerConfig.MaxRetries when unset.
const DefaultMaxRetries = 100

// Worker consumes one queue: it fetches deliveries, runs their tasks and
// records the outcome. Create it with Server.NewWorker.
type Worker struct {
	srv *Server
	cfg WorkerConfig
	log *slog.Logger

	slots   chan struct{}
	work    chan *driver.Delivery // fetched deliveries, to the runners
	runners sync.WaitGroup        // Concurrency long-lived goroutines running tasks

	startOnce sync.Once
	stopFetch context.CancelFunc
	fetchCtx  context.Context
	hardCtx   context.Context // cancelled when shutdown gives up waiting: ends running tasks
	hardStop  context.CancelFunc
	callCtx   context.Context // parent of every broker and backend call; ended shortly after hardCtx
	callStop  context.CancelFunc
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
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = s.log
	}
	w := &Worker{srv: s, cfg: cfg, log: log, slots: make(chan struct{}, cfg.Concurrency),
		work: make(chan *driver.Delivery, cfg.Concurrency), loopDone: make(chan struct{})}
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	w.hardCtx, w.hardStop = context.WithCancel(context.Background())
	w.callCtx, w.callStop = context.WithCancel(context.Background())
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

// shutdownGrace is how long, after Shutdown's ctx is done and running
// tasks are cancelled, their deliveries may still be released; then every
// broker and backend call still in progress is cancelled too.
const shutdownGrace = 500 * time.Millisecond

// Shutdown stops fetching, then waits for running tasks. If ctx is done
// first, it cancels the tasks' contexts and, as each returns, releases its
// delivery back to the broker unrecorded so another worker runs it; after
// a short grace (half a second) it cancels every broker and backend call
// still in progress, so a server that stopped answering cannot hold it, and
// returns ctx.Err() once the tasks have all returned. Task functions must
// honour their ctx for this to be prompt. Like http.Server.Shutdown, it may
// be called once; a worker never started shuts down at once.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.Start() // so loopDone closes even for a worker never started
	w.stopFetch()
	done := make(chan struct{})
	go func() {
		<-w.loopDone
		w.tasks.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		w.hardStop()
		grace := time.NewTimer(shutdownGrace)
		select {
		case <-done:
		case <-grace.C:
		}
		grace.Stop()
	}
	w.hardStop()
	w.callStop()
	<-done
	w.runners.Wait() // the loop closed w.work; runners return once it is drained
	return err
}

// call returns the ctx of one step of handling a delivery: bounded by
// CallTimeout (by the shutdown grace once Shutdown has given up waiting),
// and ended by Shutdown when the grace is over. Drivers that only honour
// deadlines, not cancellation, still return in time.
func (w *Worker) call() (context.Context, context.CancelFunc) {
	timeout := w.cfg.CallTimeout
	if w.hardCtx.Err() != nil {
		timeout = min(timeout, shutdownGrace)
	}
	return context.WithTimeout(w.callCtx, timeout)
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
	b := w.srv.broker
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

func (w *Worker) handle(d *driver.Delivery) {
	defer w.tasks.Done()
	defer func() { <-w.slots }()
	b := w.srv.broker

	sig, err := DecodeSignature(d.Body)
	if err != nil {
		reason := fmt.Sprintf("%v (message %q on queue %q)", err, d.ID, d.Queue)
		ctx, cancel := w.call()
		defer cancel()
		if rerr := b.Reject(ctx, d, reason); rerr != nil {
			w.report(rerr, "errand: reject malformed message", "message", d.ID)
		}
		w.report(fmt.Errorf("errand: set aside: %s", reason), "errand: malformed message set aside", "message", d.ID)
		return
	}

	stopExtend := w.extendLease(d)
	outcome, err := w.process(sig)
	waitExtend := stopExtend()
	if outcome != release {
		waitExtend() // settle only once no extend can follow
	} else {
		// Shutdown: an extend stuck on a silent server must not hold the
		// release back; the two end by their own deadlines, side by side.
		defer waitExtend()
	}
	ctx, cancel := w.call()
	defer cancel()
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

// extendLease renews d's lease every ExtendEvery, each renewal bounded by
// half of that, until the returned stop func is called; stop returns a func
// that waits until the extender has stopped.
func (w *Worker) extendLease(d *driver.Delivery) (stop func() (wait func())) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.ExtendEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(w.callCtx, min(w.cfg.ExtendEvery/2, w.cfg.CallTimeout))
				err := w.srv.broker.Extend(ctx, d, w.cfg.Lease)
				cancel()
				if err != nil {
					w.report(err, "errand: extend lease", "message", d.ID)
				}
			}
		}
	}()
	return func() func() {
		close(quit)
		return func() { <-done }
	}
}

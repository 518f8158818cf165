package errand

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Queue to consume. Default: the server's default queue, unless
	// Queues is set. With Queues, Queue may be left empty; if set, it
	// must be one of Queues (Validate).
	Queue string
	// Queues, if set, are the queues to consume, each with its weight
	// (1 or more), like asynq's Config.Queues: under a backlog on every
	// queue, the worker starts tasks of each queue in proportion to its
	// weight ({"critical": 6, "default": 3, "low": 1} starts 6, 3 and 1
	// of every 10), and a queue with nothing to do leaves its share to
	// the others. See docs/flow-control.md. Default: just Queue.
	Queues map[string]int
	// StrictPriority: a free slot always goes to the queue with the
	// highest weight that has a task waiting, so a lower queue runs only
	// while every higher one is empty. A higher queue whose last fetch
	// found tasks is waited for up to 100ms while its next fetch is under
	// way, so a lower queue may start up to 100ms late once the higher
	// one runs dry. Default: false (by weight).
	StrictPriority bool
	// QueueConcurrency caps, per queue, how many of its tasks run at
	// once, within Concurrency (0 or absent: no cap but Concurrency). Each
	// key must be a queue the worker consumes. Default: none.
	QueueConcurrency map[string]int
	// Concurrency is how many tasks run at once: a slot is held from a
	// delivery's fetch until its task's function returns, and the worker
	// never fetches more than it has free slots for. What follows the
	// function — recording SUCCESS, RETRY or FAILURE, sending callbacks,
	// the ack, and the lease extension until the ack — no longer holds the
	// slot: up to Concurrency more deliveries may be settling beside the
	// running ones (a task whose function returned while that many are
	// settling keeps its slot until one of them is done), so at most
	// 2×Concurrency deliveries are in hand at once. QueueConcurrency caps
	// and heartbeats count running functions only. Default: 10.
	Concurrency int
	// Lease is how long a fetched delivery stays invisible to other
	// consumers. While a task runs its lease is extended every
	// ExtendEvery, so Lease only bounds how long a crashed worker's tasks
	// wait before redelivery. Default: 30s.
	Lease time.Duration
	// ExtendEvery is how often a running task's lease is extended.
	// Default: Lease/3. Each extend call is bounded by ExtendEvery/2; a
	// failed one (a server slow or paused, a dropped connection) is retried
	// at once with a short backoff (ExtendEvery/20, doubling up to
	// ExtendEvery/10) rather than at the next tick, so an outage that ends
	// more than ExtendEvery/10 before the lease would run out (it has at
	// least Lease-ExtendEvery left when the outage begins) costs no lease.
	// Once the broker answers ErrLeaseLost, extending stops and the loss is
	// reported once.
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
	// backend or broker failed while it was handled, and the first step of
	// the backoffs below. Default: 1s.
	//
	// After a failed Fetch the loop waits ErrorBackoff, then twice that
	// after a second failure in a row, four times after a third, and so on
	// up to MaxErrorBackoff, each wait drawn at random from [d/2, d] (equal
	// jitter), so many workers reconnecting to a recovering server spread
	// out instead of arriving together. A successful Fetch resets it.
	ErrorBackoff time.Duration
	// MaxErrorBackoff caps the exponential backoffs: the fetch loop's after
	// failed fetches, and the wait before a task nobody here can run is
	// offered again (UnknownTaskAttempts). Default: 30s (ErrorBackoff if
	// that is longer).
	MaxErrorBackoff time.Duration
	// MaxRetries caps the RetryCount of every task this worker runs: a
	// signature asking for more retries gets MaxRetries (a message is input,
	// and a RetryCount of a billion must not keep a task cycling for ever).
	// Default (0): 100. Negative: no retries at all.
	MaxRetries int
	// UnknownTaskAttempts bounds how a task whose name has no function on
	// this worker is handled. Below it (the broker's Delivery.Attempt
	// counts each delivery), the delivery is given back to the broker,
	// recording nothing, to be offered again after an exponential backoff
	// (ErrorBackoff doubling up to MaxErrorBackoff, equal jitter), so a
	// worker that has the function — another application on a shared
	// queue, a newer version during a rolling deploy — can run it. On the
	// UnknownTaskAttempts-th delivery the task is recorded FAILURE with
	// ErrUnknownTask and the message is set aside (Broker.Reject, dead
	// letters). On a broker that does not count deliveries (Attempt 0) the
	// task fails at its first delivery. 1 fails at once. Default: 10.
	UnknownTaskAttempts int
	// MaxMessageSize is the largest delivery body, in bytes, the worker
	// decodes: a larger one is set aside (Broker.Reject) undecoded with
	// ErrPayloadTooLarge in its reason, so one huge message cannot take the
	// worker's memory. Default: the broker's Limits().MaxPayload when it
	// declares one (what errand lets producers send), else 16 MiB.
	// Negative: no bound.
	MaxMessageSize int
	// CallTimeout bounds each step of handling a delivery that calls the
	// broker or backend (recording states, sending callbacks and retries,
	// acking or releasing), so a server that stops answering holds a slot
	// no longer than this: the step fails and the delivery is redelivered.
	// Default: 10s.
	CallTimeout time.Duration
	// ArchiveRetention bounds the archive of the worker's queue, on a
	// broker that keeps one (driver.Archiver): every task that ends for
	// good without success (retries exhausted, a permanent error, bad
	// arguments, an unknown name at UnknownTaskAttempts, an undecodable
	// message) is archived with its message, reason, attempts and last
	// error, and the archive keeps at most MaxCount entries for at most
	// MaxAge. Each field defaults on its own: MaxCount 0 means 10 000
	// entries, MaxAge 0 means 90 days (asynq's), so Retention{MaxCount: 100}
	// keeps 100 entries for 90 days. A negative field means no bound. See
	// [Server.List] (ListArchived) and [Server.Requeue].
	ArchiveRetention Retention
	// PausePoll is how often the worker asks the broker whether its queue
	// is paused (Server.Pause), on a broker that can pause queues
	// (driver.Pauser): a pause stops its fetching within about this long.
	// Default: 500ms. Negative: never asks.
	PausePoll time.Duration
	// Heartbeat is how often the worker reports itself to the broker's
	// registry of live workers (Server.Workers), on a broker that keeps one
	// (driver.Heartbeater); an entry not renewed for three intervals
	// disappears, so a crashed worker is gone within 3×Heartbeat. During
	// Shutdown the worker keeps beating, with the tasks still running,
	// until they have all returned, then removes its entry; if Shutdown's
	// ctx ends first (a silent server), it stops beating once the shutdown
	// grace is over and the entry expires. A worker never started never
	// beats. Default: 5s. Negative: no heartbeats.
	Heartbeat time.Duration
	// Middleware wraps every attempt a worker runs, Middleware[0]
	// outermost (see Middleware). Default: none.
	Middleware []Middleware
	// ErrorHandler, if set, receives every error the worker cannot return to
	// anyone: task failures, and broker or backend errors of the loop.
	ErrorHandler func(err error)
	// Logger receives the worker's warnings. Default: the server's.
	Logger *slog.Logger
}

// Worker defaults (see WorkerConfig).
const (
	DefaultMaxRetries          = 100                 // WorkerConfig.MaxRetries
	DefaultUnknownTaskAttempts = 10                  // WorkerConfig.UnknownTaskAttempts
	DefaultMaxErrorBackoff     = 30 * time.Second    // WorkerConfig.MaxErrorBackoff
	DefaultMaxMessageSize      = 16 << 20            // WorkerConfig.MaxMessageSize on a broker declaring no MaxPayload
	DefaultArchiveMaxCount     = 10_000              // WorkerConfig.ArchiveRetention.MaxCount
	DefaultArchiveMaxAge       = 90 * 24 * time.Hour // WorkerConfig.ArchiveRetention.MaxAge
	DefaultPausePoll           = 500 * time.Millisecond
	DefaultHeartbeat           = 5 * time.Second
)

// Worker consumes one queue, or several (WorkerConfig.Queues): it
// fetches deliveries, runs their tasks and records the outcome. Create it
// with Server.NewWorker.
type Worker struct {
	srv *Server
	cfg WorkerConfig
	log *slog.Logger
	err error // an invalid configuration: Run returns it, Start reports it

	id       string
	archiver driver.Archiver // the broker's archive; nil when it keeps none
	queues   []*workerQueue  // highest weight first
	multi    bool            // one fetch loop per queue and a dispatcher (queues.go)
	amu      sync.Mutex      // the queues' dispatch state
	kick     chan struct{}   // wakes the dispatcher
	running  *runningTasks   // nil without heartbeats
	bg       sync.WaitGroup  // the pause poller and the heartbeat

	mw      []Middleware   // cfg.Middleware, then the hooks
	slots   chan struct{}  // one per delivery held before or while its function runs (Concurrency)
	settles chan struct{}  // one per delivery settling after its function returned (Concurrency)
	work    chan job       // fetched deliveries, to the runners
	runners sync.WaitGroup // 2×Concurrency long-lived goroutines handling deliveries

	startOnce sync.Once
	stopFetch context.CancelFunc
	fetchCtx  context.Context
	hardCtx   context.Context // cancelled when shutdown gives up waiting: ends running tasks
	hardStop  context.CancelFunc
	callCtx   context.Context // parent of every broker and backend call; ended shortly after hardCtx
	callStop  context.CancelFunc
	loopDone  chan struct{}
	tasks     sync.WaitGroup
	drained   chan struct{} // closed once fetching has stopped and every task has returned
	drainOnce sync.Once
}

// NewWorker returns a worker for cfg. It does nothing until Start or Run.
// A cfg that Validate refuses gives a worker whose Run returns that error
// at once, whose Start reports it (ErrorHandler, Logger) and fetches
// nothing, and whose Err returns it.
func (s *Server) NewWorker(cfg WorkerConfig) *Worker {
	cfgErr := cfg.Validate()
	if cfg.Queue == "" && len(cfg.Queues) == 0 {
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
	if cfg.MaxErrorBackoff <= 0 {
		cfg.MaxErrorBackoff = DefaultMaxErrorBackoff
	}
	cfg.MaxErrorBackoff = max(cfg.MaxErrorBackoff, cfg.ErrorBackoff)
	if cfg.UnknownTaskAttempts <= 0 {
		cfg.UnknownTaskAttempts = DefaultUnknownTaskAttempts
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = s.broker.limits.MaxPayload
		if cfg.MaxMessageSize <= 0 {
			cfg.MaxMessageSize = DefaultMaxMessageSize
		}
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
	if cfg.ArchiveRetention.MaxCount == 0 {
		cfg.ArchiveRetention.MaxCount = DefaultArchiveMaxCount
	}
	if cfg.ArchiveRetention.MaxAge == 0 {
		cfg.ArchiveRetention.MaxAge = DefaultArchiveMaxAge
	}
	if cfg.PausePoll == 0 {
		cfg.PausePoll = DefaultPausePoll
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	log := cfg.Logger
	if log == nil {
		log = s.log
	}
	w := &Worker{srv: s, cfg: cfg, log: log, err: cfgErr, id: newWorkerID(), slots: make(chan struct{}, cfg.Concurrency),
		settles: make(chan struct{}, cfg.Concurrency), work: make(chan job, cfg.Concurrency), kick: make(chan struct{}, 1), loopDone: make(chan struct{}), drained: make(chan struct{})}
	w.queues, w.multi = workerQueues(cfg)
	if w.cfg.Queue == "" {
		w.cfg.Queue = w.queues[0].name // where a delivery naming no queue came from, failing all else
	}
	w.archiver = s.broker.can.archiver
	if s.broker.can.heartbeater != nil && cfg.Heartbeat > 0 {
		w.running = &runningTasks{m: map[string]RunningTask{}}
	}
	w.mw = append([]Middleware(nil), cfg.Middleware...)
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	w.hardCtx, w.hardStop = context.WithCancel(context.Background())
	w.callCtx, w.callStop = context.WithCancel(context.Background())
	return w
}

// Start begins fetching in the background. Calling it again does nothing.
// Deliveries are handled on 2×Concurrency long-lived goroutines (their
// stacks, once grown, are kept across tasks): Concurrency slots for
// deliveries before and while their functions run, and as many for
// deliveries settling after (WorkerConfig.Concurrency), so a delivery
// holding a slot always finds a runner free.
func (w *Worker) Start() {
	w.startOnce.Do(func() {
		if w.err != nil {
			w.report(w.err, "errand: invalid worker configuration: not started")
			close(w.work)
			close(w.loopDone)
			return
		}
		for range 2 * w.cfg.Concurrency {
			w.runners.Go(func() {
				for j := range w.work {
					w.handle(j)
				}
			})
		}
		w.startBackground()
		if w.multi {
			go w.loopQueues()
		} else {
			go w.loop()
		}
	})
}

// Err returns the worker's configuration error (see
// WorkerConfig.Validate), nil when the configuration is valid.
func (w *Worker) Err() error { return w.err }

// ID returns the worker's ID, as Server.Workers reports it.
func (w *Worker) ID() string { return w.id }

// Run starts the worker and blocks until ctx is done, then shuts down
// gracefully within ShutdownTimeout. It returns nil after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	if w.err != nil {
		return w.err
	}
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

// Shutdown stops fetching, then waits for running tasks and for the
// deliveries still settling after their functions returned (recording
// their outcome, sending their callbacks, acking). If ctx is done
// first, it cancels the tasks' contexts and, as each returns, releases its
// delivery back to the broker unrecorded so another worker runs it; after
// a short grace (half a second) it cancels every broker and backend call
// still in progress, so a server that stopped answering cannot hold it, and
// returns ctx.Err() once the tasks have all returned. Task functions must
// honour their ctx for this to be prompt. A worker never started shuts
// down at once. Calling Shutdown again (a deferred call after Run, a test
// cleanup) waits for the same shutdown and never starts the worker.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.stopFetch()
	w.startOnce.Do(func() {
		// Never started: nothing runs and nothing may start now — no
		// runners, no pause poller, no heartbeat, no call to the broker.
		close(w.work)
		close(w.loopDone)
	})
	done := make(chan struct{})
	go func() {
		<-w.loopDone
		w.tasks.Wait()
		w.drainOnce.Do(func() { close(w.drained) }) // the heartbeat, which beat until now, removes the worker's entry
		w.bg.Wait()
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

// taskAttrs are the attributes of every log line about one task: its
// name, UUID, queue and 1-based attempt.
func taskAttrs(sig *Signature, queue string) []any {
	return []any{"task", sig.Name, "uuid", sig.UUID, "queue", queue, "attempt", sig.attempt()}
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
	failures := 0 // failed fetches in a row
	w.pollPause() // a worker starting on a paused queue fetches nothing
	pause := w.queues[0].pause
	for {
		if resumed := pause.wait(); resumed != nil {
			select {
			case <-resumed:
			case <-w.fetchCtx.Done():
				return
			}
		}
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
		if len(ds) > 0 && pause.on() {
			// Paused while the fetch waited: give them back untouched.
			w.giveBack(ds)
			for range ds {
				<-w.slots
			}
			ds = nil
		}
		for _, d := range ds {
			w.tasks.Add(1)
			w.work <- job{d: d} // never blocks: a slot is held for each delivery
		}
		if err == nil {
			failures = 0
			continue
		}
		if w.fetchCtx.Err() != nil {
			return
		}
		failures++
		w.report(err, "errand: fetch failed", "queue", w.cfg.Queue, "failures_in_a_row", failures)
		if errors.Is(err, ErrClosed) {
			return
		}
		t := time.NewTimer(w.backoff(failures))
		select {
		case <-t.C:
		case <-w.fetchCtx.Done():
			t.Stop()
			return
		}
	}
}

// backoff returns the wait after the n-th failure in a row (n >= 1):
// ErrorBackoff doubled n-1 times, capped at MaxErrorBackoff, drawn at
// random from [d/2, d] (equal jitter: spread out, yet never near zero).
func (w *Worker) backoff(n int) time.Duration {
	d := expDelay(w.cfg.ErrorBackoff, w.cfg.MaxErrorBackoff, n)
	return d/2 + rand.N(d-d/2+1)
}

// settle is how a handled delivery leaves the worker.
type settle int

const (
	ack      settle = iota // done: remove it
	requeue                // something failed: deliver again after ErrorBackoff
	release                // shutdown: deliver again at once
	setAside               // must not run: archive it (Reject it, without an archive), the error as the reason
	archive                // failed for good: archive it (Ack it, without an archive), the error as the reason
	passOn                 // no function here: deliver again after backoff(Attempt), for another worker
	throttle               // over its rate limit: deliver again after the wait its *throttledError carries, recording nothing
)

func (w *Worker) handle(j job) {
	defer w.tasks.Done()
	// The delivery holds its slot until its function returns (ran), then a
	// settling place until it is settled; one that never runs its function
	// holds its slot to the end.
	settling := false
	freeSlot := func() {
		<-w.slots
		if j.q != nil {
			w.finished(j.q)
		}
	}
	ran := func() {
		if settling {
			return // a middleware that ran the attempt twice
		}
		settling = true
		w.settles <- struct{}{} // with Concurrency settling, keep the slot until one is done
		freeSlot()
	}
	defer func() {
		if settling {
			<-w.settles
		} else {
			freeSlot()
		}
	}()
	d := j.d
	b := w.srv.broker
	// A delivery that waited in a queue's hand has had its lease extended
	// since it was fetched.
	stopExtend := j.stop
	discard := func(reason error) {
		if stopExtend != nil {
			stopExtend()() // no extend may follow the settling
		}
		w.setAside(d, reason)
	}

	if lim := w.cfg.MaxMessageSize; lim > 0 && len(d.Body) > lim {
		discard(fmt.Errorf("%w: message %q on queue %q is %d bytes, over the worker's MaxMessageSize of %d bytes: set aside without decoding", ErrPayloadTooLarge, d.ID, d.Queue, len(d.Body), lim))
		return
	}
	body, err := w.srv.cfg.Signing.open(d.Body)
	if err != nil {
		discard(fmt.Errorf("%w (message %q on queue %q): not run, set aside", err, d.ID, d.Queue))
		return
	}
	sig, err := DecodeSignature(body)
	if err != nil {
		discard(fmt.Errorf("%w (message %q on queue %q)", err, d.ID, d.Queue))
		return
	}
	// A signature that names no queue (sent by hand, or by another
	// producer) lives on the queue it came from: its retries and callbacks
	// go back there, never to queue "" where no worker reads.
	queue := d.Queue
	if queue == "" {
		queue = w.cfg.Queue
	}
	routeTo(sig, queue)

	if stopExtend == nil {
		stopExtend = w.extendLease(d)
	}
	outcome, err := w.process(sig, d, ran)
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
		err = b.ack(ctx, d)
		if err != nil {
			w.report(err, "errand: ack", taskAttrs(sig, queue)...)
		}
	case requeue:
		w.report(err, "errand: task requeued after an error", taskAttrs(sig, queue)...)
		if rerr := b.Release(ctx, d, time.Now().Add(w.cfg.ErrorBackoff)); rerr != nil {
			w.report(rerr, "errand: release", taskAttrs(sig, queue)...)
		}
	case release:
		if rerr := b.Release(ctx, d, time.Time{}); rerr != nil {
			w.report(rerr, "errand: release on shutdown", taskAttrs(sig, queue)...)
		}
	case setAside:
		w.reject(ctx, d, sig, err)
	case archive:
		if w.archiver == nil {
			if err := b.ack(ctx, d); err != nil {
				w.report(err, "errand: ack", taskAttrs(sig, queue)...)
			}
			break
		}
		w.archiveFailed(ctx, d, sig, err)
	case passOn:
		wait := w.backoff(d.Attempt)
		w.log.Info("errand: no function for this task here: given back for another worker", append(taskAttrs(sig, queue),
			"delivery", d.Attempt, "of", w.cfg.UnknownTaskAttempts, "retry_in", wait)...)
		if rerr := b.Release(ctx, d, time.Now().Add(wait)); rerr != nil {
			w.report(rerr, "errand: release unknown task", taskAttrs(sig, queue)...)
		}
	case throttle:
		w.releaseThrottled(ctx, d, sig, err)
	}
}

// setAside rejects d, which is not handled at all, for reason.
func (w *Worker) setAside(d *driver.Delivery, reason error) {
	ctx, cancel := w.call()
	defer cancel()
	w.reject(ctx, d, nil, reason)
}

// reject sets d aside for good with reason, and reports it: into the
// queue's archive where the broker keeps one, else its dead letters. sig
// is the decoded task, nil when d did not decode.
func (w *Worker) reject(ctx context.Context, d *driver.Delivery, sig *Signature, reason error) {
	if w.archiver != nil {
		w.archiveFailed(ctx, d, sig, reason)
	} else if err := w.srv.broker.Reject(ctx, d, reason.Error()); err != nil {
		w.report(err, "errand: reject", "message", d.ID, "queue", d.Queue)
	}
	w.report(fmt.Errorf("errand: set aside: %w", reason), "errand: message set aside", "message", d.ID, "queue", d.Queue)
}

// archiveFailed archives d, whose task (sig; nil when d did not decode)
// ended for good with cause.
func (w *Worker) archiveFailed(ctx context.Context, d *driver.Delivery, sig *Signature, cause error) {
	e := driver.ArchiveEntry{Message: d.Message, Reason: archiveReason(cause), Error: cause.Error(), Attempts: d.Attempt, At: time.Now().UTC()}
	if sig != nil {
		e.Attempts = sig.attempt()
	}
	if err := w.srv.broker.archive(ctx, w.archiver, d, e, w.cfg.ArchiveRetention); err != nil {
		attrs := []any{"message", d.ID, "queue", d.Queue}
		if sig != nil {
			attrs = taskAttrs(sig, d.Queue)
		}
		w.report(err, "errand: archive", attrs...)
	}
}

// routeTo gives sig, and every signature linked to it, queue as its
// RoutingKey where it names none.
func routeTo(sig *Signature, queue string) {
	if sig == nil {
		return
	}
	if sig.RoutingKey == "" {
		sig.RoutingKey = queue
	}
	for _, c := range sig.OnSuccess {
		routeTo(c, queue)
	}
	for _, c := range sig.OnError {
		routeTo(c, queue)
	}
	routeTo(sig.ChordCallback, queue)
}

// extendLease renews d's lease every ExtendEvery until the returned stop
// func is called; stop returns a func that waits until the extender has
// stopped. Each renewal is bounded by ExtendEvery/2 (so Shutdown is not held
// by a silent server). A failed renewal is retried with a short backoff
// instead of waiting for the next tick, for as long as the lease may still
// hold: an outage shorter than what is left of the lease costs nothing.
// Errors are reported once per outage, not once per try; ErrLeaseLost (the
// broker may have handed the message to another consumer) ends the
// renewals, reported once.
func (w *Worker) extendLease(d *driver.Delivery) (stop func() (wait func())) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := w.cfg.ExtendEvery
		// The lease was granted during the fetch, just before now: its
		// end is estimated a little late, never early by more than that.
		leaseEnd := time.Now().Add(w.cfg.Lease)
		extend := func() error {
			start := time.Now()
			ctx, cancel := context.WithTimeout(w.callCtx, min(every/2, w.cfg.CallTimeout))
			defer cancel()
			err := w.srv.broker.Extend(ctx, d, w.cfg.Lease)
			if err == nil {
				leaseEnd = start.Add(w.cfg.Lease) // granted no earlier than the call began
			}
			return err
		}
		// sleep waits for d, or reports false when stop was called.
		sleep := func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-quit:
				return false
			}
		}
		t := time.NewTicker(every)
		defer t.Stop()
		outage := false  // a renewal failed and none has succeeded since
		expired := false // the outage outlasted the lease (reported)
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			err := extend()
			for wait := every / 20; err != nil && !errors.Is(err, driver.ErrLeaseLost) && !errors.Is(err, ErrClosed) && w.callCtx.Err() == nil; wait = min(2*wait, every/10) {
				if !outage {
					outage = true
					w.report(err, "errand: extend lease failed; retrying while the lease lasts", "message", d.ID, "queue", d.Queue, "lease_left", time.Until(leaseEnd))
				}
				if !time.Now().Add(wait).Before(leaseEnd) {
					// The lease has run out on our clock: the broker may hand
					// the message to another consumer. Keep trying at the
					// tick's pace, in case none took it.
					if !expired {
						expired = true
						w.report(fmt.Errorf("errand: message %q: lease not renewed within %v (last error: %w); the task may run again elsewhere", d.ID, w.cfg.Lease, err),
							"errand: lease ran out during an outage", "message", d.ID, "queue", d.Queue)
					}
					break
				}
				if !sleep(wait) {
					return
				}
				err = extend()
			}
			switch {
			case err == nil:
				outage, expired = false, false
			case errors.Is(err, driver.ErrLeaseLost):
				w.report(err, "errand: lease lost; no longer extended (another consumer may run the task)", "message", d.ID, "queue", d.Queue)
				return
			case errors.Is(err, ErrClosed):
				return
			}
		}
	}()
	return func() func() {
		close(quit)
		return func() { <-done }
	}
}

package errand

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/lease"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Queues are the queues to consume, each with its weight (1 or
	// more), like asynq's Config.Queues: under a backlog on every queue,
	// the worker starts tasks of each queue in proportion to its weight
	// ({"critical": 6, "default": 3, "low": 1} starts 6, 3 and 1 of every
	// 10), whatever the fetches' round trips, and a queue with nothing to
	// do leaves its share to the others. One queue's weight does not
	// matter. See docs/flow-control.md. Default: the server's default
	// queue (Config.DefaultQueue).
	Queues map[string]int
	// StrictPriority: a free slot always goes to the queue with the
	// highest weight that has a task waiting, so a lower queue runs only
	// while every higher one is empty. Empty is judged by fetches: a free
	// slot waits for a higher queue's fetch under way up to 1s when its
	// last fetch found all it asked for (a backlog), and up to 100ms when
	// it found fewer (it ran out), so a lower queue may start that late
	// once the higher one runs dry. Default: false (by weight).
	StrictPriority bool
	// QueueConcurrency caps, per queue, how many of its tasks run at
	// once, within Concurrency (0 or absent: no cap but Concurrency). Each
	// key must be a queue the worker consumes; on a worker of one queue a
	// lower cap is its Concurrency. Default: none.
	QueueConcurrency map[string]int
	// QueueConcurrencyLimit caps, per queue, how many of its tasks run at
	// once across every worker on the broker's server (QueueConcurrency
	// caps this worker alone): each entry (1 or more) is a limit kept on
	// the broker's server (driver.ConcurrencyLimiter), where each
	// attempt takes a slot before it starts, as with WithConcurrencyLimit
	// (docs/flow-control.md). Every worker consuming the queue should set
	// the same limit; one that sets none takes no slot. Each key must be
	// a queue the worker consumes. On a broker that keeps no concurrency
	// limits the worker's Err is an error satisfying
	// errors.Is(err, errors.ErrUnsupported). Default: none.
	QueueConcurrencyLimit map[string]int
	// Concurrency is how many tasks run at once: a slot is held from a
	// delivery's fetch until its task's function returns. Each queue has
	// one fetch loop. On one queue it fetches only as many deliveries as
	// the worker has free slots, holding them while it fetches: it never
	// fetches beyond them. On several queues, where a slot held by a fetch
	// waiting on an empty queue would be lost to the others, each queue's
	// fetch asks for its share of the free slots plus one without holding
	// them (docs/flow-control.md), so up to that many deliveries per queue
	// may wait, leased and extended, in the worker's hand beyond its free
	// slots. What follows the function — recording SUCCESS, RETRY or
	// FAILURE, sending callbacks, the ack, and the lease extension until
	// the ack — no longer holds the slot: up to Concurrency more
	// deliveries may be settling beside the running ones (a task whose
	// function returned while that many are settling keeps its slot until
	// one of them is done). QueueConcurrency caps and heartbeats count
	// running functions only. Default: 10.
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
	// reported once. After each extension of a running task the worker
	// reads its state: a task cancelled (Server.Cancel) has its ctx
	// cancelled then, on a broker that sends no cancel notices. While
	// those reads fail, the worker's reads back off together (from
	// ExtendEvery, doubling up to 8×ExtendEvery; docs/task-control.md).
	ExtendEvery time.Duration
	// TaskTimeout bounds one attempt of every task without its own
	// Signature.Timeout: the task's ctx is cancelled after it. Default: none.
	TaskTimeout time.Duration
	// ShutdownTimeout is how long Run waits for running tasks after its ctx
	// is done, before cancelling them and releasing their deliveries (the
	// ctx Run gives Shutdown). Default: 30s.
	ShutdownTimeout time.Duration
	// SettleGrace is how long, once Shutdown's ctx has ended with tasks
	// still running, the worker goes on in the background settling the
	// tasks that return: a task that returns within it has its outcome
	// recorded and its message acked (or, when it returned an error after
	// its ctx was cancelled, released for another worker) as if Shutdown
	// had waited; the leases of the tasks still running are extended
	// meanwhile. When the grace ends, every broker and backend call still
	// open is cancelled and nothing more is called: a task returning
	// later is not recorded, its lease runs out, and the broker delivers
	// it again. Run waits for the settling (at most SettleGrace after
	// ShutdownTimeout). Default: 10s. Negative: no grace (calls are
	// cancelled when Shutdown gives up).
	SettleGrace time.Duration
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
	// MaxSnoozes bounds how many times one task may snooze ([Snooze]):
	// a task that snoozed MaxSnoozes times and snoozes again fails, with
	// an error satisfying errors.Is(err, ErrSnoozesExhausted) (ErrorKind
	// "snoozes_exhausted"), so a task that waits for something that never
	// comes ends where an operator sees it. Default (0): 100. Negative: no
	// snoozes at all (a snooze fails the task).
	MaxSnoozes int
	// MaxProgressSize bounds, in bytes, the JSON encoding of a value a
	// task reports with [SetProgress]: a larger one is refused, the error
	// returned to the task, nothing written. Default (0): 4 KiB.
	// Negative: no bound.
	MaxProgressSize int
	// ProgressEvery is the shortest time between two writes of one
	// task's progress ([SetProgress]): the first value is written at once,
	// later ones at most once per ProgressEvery, the latest kept in
	// between and written when the interval ends (or with the task's final
	// state, if that comes first). Default (0): 1s. Negative: no interval
	// (still one write at a time, the latest value only).
	ProgressEvery time.Duration
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
	// Steps that begin within CallTimeout/100 (at most 10ms) of each other
	// share one deadline, so each has at least 99% of it. Default: 10s.
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
	// until they have all returned and settled (through the SettleGrace
	// once Shutdown's ctx has ended), then removes its entry; if the
	// settle grace ends first (a silent server, a task that never
	// returns), it stops beating and the entry expires. A worker never
	// started never beats. Default: 5s. Negative: no heartbeats.
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
	DefaultSettleGrace         = 10 * time.Second // WorkerConfig.SettleGrace
	DefaultMaxSnoozes          = 100              // WorkerConfig.MaxSnoozes
	DefaultMaxProgressSize     = 4 << 10          // WorkerConfig.MaxProgressSize
	DefaultProgressEvery       = time.Second      // WorkerConfig.ProgressEvery
)

// Worker consumes one queue, or several (WorkerConfig.Queues): it
// fetches deliveries, runs their tasks and records the outcome. Create it
// with Server.NewWorker.
//
// A worker is made of small parts, each owning its goroutines: the fetch
// loop (one per queue, and a dispatcher with several queues: queues.go),
// the runners (2×Concurrency goroutines handling deliveries,
// process.go), the lease extender (one goroutine per delivery held,
// internal/lease), the cancel watch (cancelwatch.go), the pause poller
// (pause.go) and the heartbeater (heartbeat.go). Shutdown stops them in
// the order stop documents.
type Worker struct {
	srv      *Server
	cfg      WorkerConfig
	log      *slog.Logger
	err      error // an invalid configuration: Run returns it, Start reports it
	id       string
	archiver driver.Archiver // the broker's archive; nil when it keeps none
	mw       []Middleware    // cfg.Middleware, copied

	queues  *queueSet
	lease   *lease.Extender
	poller  *pausePoller // nil when the broker cannot pause queues or PausePoll < 0
	beat    *heartbeater // nil when the broker keeps no registry or Heartbeat < 0
	cancels *cancelWatch // the held tasks a cancel notice reaches (cancelwatch.go)

	shared  atomic.Pointer[sharedCall] // the ctx of the steps beginning now (call)
	held    heldTasks                  // the decoded deliveries in hand, for ShutdownError
	slots   chan struct{}              // one per delivery held before or while its function runs (Concurrency)
	settles chan struct{}              // one per delivery settling after its function returned (Concurrency)
	work    chan *delivery             // fetched deliveries, to the runners
	runners sync.WaitGroup             // 2×Concurrency long-lived goroutines handling deliveries
	tasks   sync.WaitGroup             // deliveries handed to the runners and not yet settled

	startOnce sync.Once
	loopDone  chan struct{} // closed once the fetch loop has returned (and closed work)
	stopOnce  sync.Once     // starts stop, once
	stopped   chan struct{} // closed once every part has returned (stop)
	// The three lifetimes Shutdown ends, in this order: fetching, the
	// running tasks (when it gives up waiting), and every broker and
	// backend call (SettleGrace later).
	fetchCtx, hardCtx, callCtx    context.Context
	stopFetch, hardStop, callStop context.CancelFunc
}

// NewWorker returns a worker for cfg. It does nothing until Start or Run.
// A cfg whose queue settings are wrong (a weight below 1, a negative cap,
// a cap for a queue the worker does not consume, an empty queue name)
// gives a worker whose Run returns that error at once, whose Start
// reports it (ErrorHandler, Logger) and fetches nothing, and whose Err
// returns it: check Err right after NewWorker to refuse a bad config
// early.
func (s *Server) NewWorker(cfg WorkerConfig) *Worker {
	cfgErr := cfg.validate()
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]int{s.cfg.DefaultQueue: 1}
		if cfgErr == nil {
			cfgErr = cfg.validate() // a cap names the default queue, or none
		}
	}
	if cfgErr == nil {
		cfgErr = s.checkQueueConcurrencyLimit(cfg)
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
	zeroIsDefault(&cfg.SettleGrace, DefaultSettleGrace)
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
		cfg.MaxMessageSize = s.broker.Limits().MaxPayload
		if cfg.MaxMessageSize <= 0 {
			cfg.MaxMessageSize = DefaultMaxMessageSize
		}
	}
	zeroIsDefault(&cfg.MaxRetries, DefaultMaxRetries)
	zeroIsDefault(&cfg.MaxSnoozes, DefaultMaxSnoozes)
	if cfg.MaxProgressSize == 0 {
		cfg.MaxProgressSize = DefaultMaxProgressSize
	}
	zeroIsDefault(&cfg.ProgressEvery, DefaultProgressEvery)
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
	qs := newQueueSet(cfg)
	w := &Worker{srv: s, cfg: cfg, log: log, err: cfgErr, id: newWorkerID(), queues: qs, slots: make(chan struct{}, qs.slots),
		settles: make(chan struct{}, cfg.Concurrency), work: make(chan *delivery, cfg.Concurrency), loopDone: make(chan struct{}),
		stopped: make(chan struct{}), held: heldTasks{m: map[*delivery]time.Time{}}}
	w.archiver = s.broker.Can.Archiver
	w.mw = append([]Middleware(nil), cfg.Middleware...)
	w.fetchCtx, w.stopFetch = context.WithCancel(context.Background())
	w.hardCtx, w.hardStop = context.WithCancel(context.Background())
	w.callCtx, w.callStop = context.WithCancel(context.Background())

	w.lease = lease.New(lease.Params{Broker: s.broker, Lease: cfg.Lease, Every: cfg.ExtendEvery, Bound: cfg.CallTimeout,
		Calls: w.callCtx, Report: w.report})
	w.cancels = newCancelWatch(cancelParams{broker: s.broker, calls: w.callCtx, report: w.report, every: cfg.ExtendEvery})
	if p := s.broker.Can.Pauser; p != nil && cfg.PausePoll > 0 {
		w.poller = newPausePoller(pauseParams{broker: s.broker, pauser: p, queues: w.queues.list, every: cfg.PausePoll,
			fetch: w.fetchCtx, call: w.call, report: w.report, log: log, changed: func(q *workerQueue) { kick(q.kick) }})
	}
	if h := s.broker.Can.Heartbeater; h != nil && cfg.Heartbeat > 0 {
		w.beat = newHeartbeater(heartbeatParams{broker: s.broker, hb: h, every: cfg.Heartbeat,
			info:     WorkerInfo{ID: w.id, Queues: w.queues.names(), Concurrency: cfg.Concurrency},
			stopping: w.fetchCtx, calls: w.callCtx, call: w.call, report: w.report, log: log})
	}
	return w
}

// zeroIsDefault sets *v, a WorkerConfig field, to def when it is 0 (not
// set) and to 0 when it is negative (none).
func zeroIsDefault[T int | time.Duration](v *T, def T) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		*v = 0
	}
}

// Start begins fetching in the background. Calling it again does nothing.
// Deliveries are handled on 2×Concurrency long-lived goroutines (their
// stacks, once grown, are kept across tasks): Concurrency slots for
// deliveries before and while their functions run, and as many for
// deliveries settling after (WorkerConfig.Concurrency), so a delivery
// holding a slot always finds a runner free.
//
// The parts start in this order: the runners, the cancel watch (which
// starts listening for cancel notices in the background), the pause
// poller, the heartbeater, then the fetch loop (which first asks whether
// its queues are paused), so nothing is fetched before something can
// handle it.
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
				for dv := range w.work {
					w.handle(dv)
				}
			})
		}
		w.cancels.start()
		w.poller.start()
		w.beat.start()
		go w.loop()
	})
}

// Err returns the worker's configuration error (see NewWorker), nil when
// the configuration is valid.
func (w *Worker) Err() error { return w.err }

// ID returns the worker's ID, as Server.Workers reports it.
func (w *Worker) ID() string { return w.id }

// Run starts the worker and blocks until ctx is done, then shuts down
// gracefully: it calls Shutdown with a ctx of ShutdownTimeout and returns
// its error (nil after a clean shutdown, else a *ShutdownError), after
// letting the tasks still running then settle for up to SettleGrace, so a
// program that exits when Run returns keeps every outcome that came in
// time.
func (w *Worker) Run(ctx context.Context) error {
	if w.err != nil {
		return w.err
	}
	w.Start()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	err := w.Shutdown(sctx)
	select {
	case <-w.stopped:
	case <-w.callCtx.Done(): // the settle grace is over
	}
	return err
}

// Shutdown stops fetching, then waits for running tasks and for the
// deliveries still settling after their functions returned (recording
// their outcome, sending their callbacks, acking), and returns nil once
// they are all settled and the worker's goroutines have returned.
//
// Like net/http.Server.Shutdown, it returns by ctx's end: if ctx is done
// first, it cancels the running tasks' contexts and returns a
// *ShutdownError (errors.Is(err, ctx.Err()) holds) naming the tasks still
// in hand. The worker goes on in the background for up to
// WorkerConfig.SettleGrace: a task that returns then is settled as if
// Shutdown had waited — a result is recorded and acked, and a task that
// returned an error after its ctx was cancelled is released, unrecorded,
// for another worker — and the leases of the tasks still running are
// extended meanwhile. Once the grace is over, every broker and backend
// call still open is cancelled, so a silent server cannot hold the
// worker, and a task that returns later is left to its lease: not
// recorded, delivered again once its lease runs out. The worker's
// goroutines return once the last task function has returned. Task
// functions must honour their ctx for all this to be prompt.
//
// A worker never started shuts down at once. Calling Shutdown again (a
// deferred call after Run, a test cleanup) never starts the worker; it
// waits, bounded by its own ctx, for the same shutdown to finish, every
// task function returned: nil then, else a *ShutdownError.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.stopFetch()
	w.startOnce.Do(func() {
		// Never started: nothing runs and nothing may start now — no
		// runners, no pause poller, no heartbeat, no call to the broker.
		close(w.work)
		close(w.loopDone)
	})
	w.stopOnce.Do(func() { go w.stop() })
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-w.stopped: // both at once: the worker did stop
		return nil
	default:
	}
	w.hardStop() // the tasks' ctx; stop begins the settle grace
	running, settling := w.held.list()
	return &ShutdownError{Err: ctx.Err(), Running: running, Settling: settling, SettleGrace: w.cfg.SettleGrace}
}

// stop ends the worker's parts, on a goroutine of its own that Shutdown
// starts once; it closes stopped when they have all returned. The order
// of termination is important:
//
//  1. Fetching stops (Shutdown cancelled fetchCtx): the fetch loops and
//     the dispatcher return, and what waits in a queue's hand is given
//     back (its lease's renewal stopped first); the pause poller, which
//     only steers fetching, returns with them.
//  2. The runners finish the deliveries they hold: running tasks return,
//     and each delivery settles (state, callbacks, ack), stopping its
//     lease's renewal before it is settled. If Shutdown gives up first, it
//     cancels the tasks' ctx (hardStop), and the settle grace begins: at
//     its end every call still open is cancelled (callStop).
//  3. The heartbeater, which kept beating with the tasks still running so
//     the registry showed them, removes the worker's entry (or, once
//     calls are cancelled, returns at once and lets it expire).
//  4. Every broker and backend call is cancelled, which ends the
//     listening for cancel notices; every lease renewal has returned
//     (each ended with its delivery, or with the calls), and the
//     runners, with nothing left to handle, return.
func (w *Worker) stop() {
	drained := make(chan struct{})
	go func() {
		<-w.loopDone // 1
		w.poller.wait()
		w.tasks.Wait() // 2
		w.beat.drain() // 3
		w.beat.wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-w.hardCtx.Done(): // Shutdown gave up waiting: the settle grace
		grace := time.NewTimer(w.cfg.SettleGrace)
		select {
		case <-drained:
		case <-grace.C:
		}
		grace.Stop()
	}
	w.hardStop()
	w.callStop() // 4
	<-drained    // a task function still running holds the worker here
	w.lease.Wait()
	w.cancels.wait()
	w.runners.Wait() // the loop closed w.work; runners return once it is drained
	close(w.stopped)
}

// call returns the ctx of one step of handling a delivery: bounded by
// CallTimeout, and ended when the settle grace is over (or the worker
// stopped). Drivers that only honour deadlines, not cancellation, still
// return in time. The steps that begin within callShare of each other
// share one ctx (a ctx and its timer per step cost more than the step's
// own work on a fast server): each has between CallTimeout-callShare and
// CallTimeout; the ctx ends by itself at its deadline, and the cancel
// call returns does nothing.
func (w *Worker) call() (context.Context, context.CancelFunc) {
	now := time.Now()
	if c := w.shared.Load(); c != nil && now.Before(c.until) {
		return c.ctx, noCancel
	}
	timeout := w.cfg.CallTimeout
	c := &sharedCall{until: now.Add(min(timeout/100, 10*time.Millisecond))}
	c.ctx, c.cancel = context.WithDeadline(w.callCtx, now.Add(timeout))
	w.shared.Store(c) // two made at once: the other serves its own step only
	return c.ctx, noCancel
}

// sharedCall is a ctx of steps (Worker.call), shared by those that begin
// before until.
type sharedCall struct {
	ctx    context.Context
	cancel context.CancelFunc // not called: the ctx ends at its deadline, or with callCtx
	until  time.Time
}

func noCancel() {}

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

// fetchFailed is the one tail of every fetch loop after a Fetch of queue
// returned err: nil resets the count of failures in a row; otherwise the
// failure is counted and reported, and the loop backs off (backoff) before
// its next fetch. It reports false when the loop must end: fetching
// stopped, or the broker is closed.
func (w *Worker) fetchFailed(queue string, err error, failures *int) bool {
	if err == nil {
		*failures = 0
		return true
	}
	if w.fetchCtx.Err() != nil {
		return false
	}
	*failures++
	w.report(err, "errand: fetch failed", "queue", queue, "failures_in_a_row", *failures)
	if errors.Is(err, ErrClosed) {
		return false
	}
	t := time.NewTimer(w.backoff(*failures))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.fetchCtx.Done():
		return false
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
	settleAck      settle = iota // done: remove it
	settleRequeue                // something failed: deliver again after ErrorBackoff
	settleRelease                // shutdown: deliver again at once
	settleSetAside               // must not run: archive it (Reject it, without an archive), the error as the reason
	settleArchive                // failed for good: archive it (Ack it, without an archive), the error as the reason
	settlePassOn                 // no function here: deliver again after backoff(Attempt), for another worker
	settleThrottle               // over its rate or concurrency limit: deliver again after the wait its *throttledError carries, recording nothing
	settleAbandon                // its lease is lost, or the settle grace is over: record nothing, call nothing; the broker delivers it again
)

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
	if err := w.srv.broker.ArchiveVia(ctx, w.archiver, d, e, w.cfg.ArchiveRetention); err != nil {
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

// heldTasks are the decoded deliveries a worker holds, from their
// decoding until they are settled, for the *ShutdownError of a Shutdown
// that gives up.
type heldTasks struct {
	mu sync.Mutex
	m  map[*delivery]time.Time // when it was decoded
}

func (h *heldTasks) add(dv *delivery) {
	h.mu.Lock()
	h.m[dv] = time.Now().UTC()
	h.mu.Unlock()
}

func (h *heldTasks) remove(dv *delivery) {
	h.mu.Lock()
	delete(h.m, dv)
	h.mu.Unlock()
}

// list returns the held tasks whose function is running (or has yet to
// run) and those settling after it returned, each oldest first.
func (h *heldTasks) list() (running, settling []RunningTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for dv, at := range h.m {
		t := RunningTask{UUID: dv.sig.UUID, Name: dv.sig.Name, Queue: dv.queue, StartedAt: at}
		if dv.returned.Load() {
			settling = append(settling, t)
		} else {
			running = append(running, t)
		}
	}
	byStart := func(a, b RunningTask) int { return a.StartedAt.Compare(b.StartedAt) }
	slices.SortFunc(running, byStart)
	slices.SortFunc(settling, byStart)
	return running, settling
}

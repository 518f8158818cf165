// Package errand is a distributed task queue: a producer sends a task — a
// registered name and its arguments — to a broker; a worker takes it, calls
// the Go function registered under that name and records the outcome in a
// result backend; chains, groups and chords compose tasks. The wire format
// and the retry schedule are machinery's.
//
// A [Server] is built on one broker and one backend. Here both are the
// in-process drivers, which need no server:
//
//	import (
//		"github.com/errand-go/errand"
//		"github.com/errand-go/errand/backends/memory" // package memorybackend
//		"github.com/errand-go/errand/brokers/memory"  // package memorybroker
//	)
//
//	srv, err := errand.NewServer(errand.Config{
//		Broker:  memorybroker.New(nil),
//		Backend: memorybackend.New(nil),
//	})
//
// Register functions and run a worker (usually in its own process, on a
// Server built on the same broker and backend):
//
//	srv.Register("add", func(ctx context.Context, a, b int) (int, error) { return a + b, nil })
//	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 10}) // the default queue
//	w.Start()
//	defer w.Shutdown(context.Background())
//
// Send a task and read its result:
//
//	res, err := srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
//	var sum int
//	err = res.GetInto(ctx, &sum) // 5: blocks until SUCCESS or FAILURE, honours ctx
//
// A chord runs a group of tasks in parallel, then one callback with every
// member's results in group order:
//
//	srv.Register("square", func(x int) (int, error) { return x * x, nil })
//	srv.Register("sum", func(xs ...int) (int, error) { ... })
//
//	var squares []*errand.Signature
//	for i := 1; i <= 10; i++ {
//		squares = append(squares, errand.NewSignature("square", i))
//	}
//	group, _ := errand.NewGroup(squares...)
//	chord, _ := errand.NewChord(group, errand.NewSignature("sum"))
//	res, err := srv.SendChord(ctx, chord, errand.SendConcurrency(4)) // up to 4 publish batches in flight
//	var total int
//	err = res.GetInto(ctx, &total) // 385
//
// # Tasks and signatures
//
// A [Signature] is one task invocation on the wire. Its field and JSON names
// are machinery's (UUID, Name, RoutingKey, ETA, GroupUUID, GroupTaskCount,
// Args, Headers, Priority, Immutable, RetryCount, RetryTimeout, OnSuccess,
// OnError, ChordCallback), so messages written by machinery decode here;
// Attempt, Timeout and Deadline are errand's additions. [NewSignature] gives
// a fresh UUID and converts each argument with [ArgOf]. RoutingKey names the
// queue (default: [Config.DefaultQueue], itself defaulting to
// [DefaultQueue]); ETA delays the task, which never runs before it.
//
// Arguments are typed ([Arg]) and any JSON-encodable Go value: on the worker
// each is decoded straight into the registered function's parameter type, so
// a []Point arrives as a []Point. A value that does not fit fails the task at
// once, without retries, with an [ArgumentError] naming the task, the
// argument index and both types.
//
// [Server.Register] accepts a function with an optional leading
// context.Context, JSON-decodable parameters (the last may be variadic),
// JSON-encodable results and an error last, and refuses anything else with
// an error naming the task. A running function finds its UUID and attempt
// number with [TaskInfoFrom].
//
// # Workers
//
// [Server.NewWorker] returns a [Worker] on the queues of
// WorkerConfig.Queues, each with its weight (none: the server's default
// queue); [WorkerConfig] documents every field with its default. A worker
// runs Concurrency tasks at once; a task's slot is freed when its function
// returns, and up to Concurrency more deliveries settle (outcome,
// callbacks, ack) beside the slots. On one queue it never fetches more
// deliveries than it has free slots. On several, it shares
// its slots among them by weight, or with StrictPriority always to the
// highest-weight queue with a task waiting, within each queue's
// QueueConcurrency cap, whatever the fetches' round trips; each queue's
// fetch asks for its share of the free slots plus one, so a delivery may
// wait for a slot, its lease extended (docs/flow-control.md). An invalid
// configuration (a weight below 1, a cap for a queue the worker does not
// consume) is returned by [Worker.Err] and [Worker.Run]. Delivery is
// at least once: each delivery is leased, the lease is extended every
// ExtendEvery while the worker holds it, and a worker that dies loses nothing —
// its tasks come back when their leases run out. A redelivered task whose
// outcome was already recorded is not run again (the worker finishes what
// the crashed one left and acks), so only work whose outcome was never
// recorded runs twice; task functions should still be idempotent.
//
// A task's ctx is cancelled after its Signature.Timeout (or the worker's
// TaskTimeout) and at its Signature.Deadline. A panic becomes a
// [PanicError] with the stack. Every step that calls the broker or backend
// is bounded by CallTimeout (default 10s): when a server stops answering,
// the step fails and the delivery is redelivered after ErrorBackoff.
// A failed lease extension is retried within the lease, so an outage shorter
// than what is left of it costs nothing; failed fetches back off
// exponentially with jitter up to MaxErrorBackoff.
//
// A task whose name has no function on the worker is given back to the
// broker for another worker, up to WorkerConfig.UnknownTaskAttempts
// deliveries, then fails with [ErrUnknownTask] and is set aside. A delivery
// larger than MaxMessageSize, or reusing the UUID of a task recorded under
// another name or running under another delivery's lease
// ([ErrUUIDConflict]), is set aside without running.
//
// [Worker.Run] blocks until its ctx is done, then shuts down within
// ShutdownTimeout (and SettleGrace). [Worker.Shutdown] works like
// http.Server.Shutdown: it stops fetching and waits for running tasks; if
// its ctx ends first, it cancels their contexts and returns by the ctx's
// end with a [ShutdownError] naming them. Within WorkerConfig.SettleGrace
// the worker still records and acks each task that returns a result, and
// releases, unrecorded, each that returns an error; then it cancels every
// broker and backend call still in progress, so a silent server cannot
// hold it. A lost lease cancels the running task's ctx with the cause
// [ErrLeaseLost], and nothing of that attempt is recorded. Beside the
// fetch loop and the runners, a worker has a lease
// extender, a pause poller (on a broker that can pause queues) and a
// heartbeater (on a broker that keeps a registry of workers); Shutdown
// stops them in one order: fetching and the pause poller first (what a
// queue holds unstarted is given back), then the running tasks return and
// settle, each delivery's lease extension ending before it settles, then
// the heartbeater, which beat on meanwhile, removes the worker's entry;
// last, every call still open is cancelled and the runners return.
//
// [Middleware] wraps every attempt: it is the one hook on running tasks.
// Whether a delivery is an attempt is decided before the middleware, on
// every backend: a redelivery of a task already finished (or owned by a
// later attempt), a task with no function here or with bad arguments, and
// one over its rate or concurrency limit never reach it, and a delivery
// that does has RECEIVED and STARTED recorded when the middleware runs.
// ErrorHandler observes errors; logs go to an injected *slog.Logger and
// are silent by default.
//
// # Task states
//
// A task is in one of seven states ([State]), with machinery's and
// Celery's names. Every change recorded is an edge of this graph:
//
//	PENDING  -> RECEIVED | FAILURE | CANCELLED
//	RECEIVED -> RECEIVED | STARTED | FAILURE | CANCELLED
//	STARTED  -> RECEIVED | SUCCESS | FAILURE | RETRY | CANCELLED
//	RETRY    -> RECEIVED | CANCELLED
//	FAILURE  -> PENDING
//
// PENDING is written by the sender before the task reaches the broker, so a
// result handle never finds a sent task unknown. RECEIVED after RECEIVED or
// STARTED is a redelivery: a worker died or shut down before finishing and
// another took the task. FAILURE straight from PENDING or RECEIVED is a task
// that could not run: an unknown name ([ErrUnknownTask]), bad arguments, a
// chord callback whose member failed. SUCCESS, FAILURE and CANCELLED are
// terminal for workers; FAILURE -> PENDING is an operator requeueing an
// archived task ([Server.Requeue]) as a fresh attempt. CANCELLED is
// written by [Server.Cancel], never by a worker's attempt: a task not yet
// started never starts, and a running one has its ctx cancelled (its
// cause satisfies errors.Is(context.Cause(ctx), [ErrCancelled])) and
// whatever it returns discarded; [AsyncResult.Get] returns a [*TaskError]
// of kind [KindCancelled] for it (docs/task-control.md). Each
// state is stored as a [TaskState] with the attempt number, results, error
// text and timestamps.
//
// # Retries
//
// A task that returns an error is retried while its attempts stay within
// its RetryCount (retries after the first attempt: RetryCount 3 means at
// most four runs). The delay before each retry comes from a [RetryPolicy],
// set per task with [WithRetryPolicy] or per worker: [Fibonacci] (the
// default, machinery's: 1, 2, 3, 5, 8 ... seconds), [Fixed], [Exponential]
// with jitter, or any [RetryFunc]. A retry is a new message with the next
// Attempt and an ETA; the task is RETRY until a worker receives it.
//
// A function steers its retries with errors found by [errors.As], so
// wrapping them works: [RetryLater] retries after a given delay (still
// counted against RetryCount), and [Permanent] fails the task at once.
// Argument errors are never retried, and no retry is scheduled past a
// signature's Deadline. A worker caps RetryCount at WorkerConfig.MaxRetries
// (default 100), and retry delays saturate rather than overflow. A retry, or
// a callback, of a signature without a RoutingKey goes back to the queue
// its parent was delivered from.
//
// # Workflows
//
// [NewChain], [NewGroup] and [NewChord] build workflows; [Server.SendChain],
// [Server.SendGroup] and [Server.SendChord] send them. What each task
// receives as arguments is fixed (and checked on every driver by the
// conformance kit):
//
//   - chain a → b: b's own Args, then a's results (machinery's order);
//   - chord callback: its own Args, then every member's results in group
//     order, member by member (a member returning two values contributes
//     two arguments), so a callback is naturally variadic;
//   - OnSuccess callback: its own Args, then the task's results;
//   - OnError callback: the error text first, then its own Args;
//   - a task with Immutable set: only its own Args.
//
// In a chain, each task is sent when the previous one succeeds, and when one
// fails for good the rest never run. A group's members run in parallel. A
// chord's callback is sent exactly once, when its last member finishes: each
// member marks itself done in the backend (idempotent and O(1)) and the one
// that completes the group claims the chord with a compare-and-set. When a
// member fails for good the callback never runs: it is marked FAILURE with an
// error naming that member, and its OnError callbacks are sent. A delivery
// is acked only after the callbacks it triggers are published, so none is
// ever dropped.
//
// # Sending inside a transaction
//
// A send whose ctx carries the application's own transaction ([WithTx]: a
// pgx.Tx for the PostgreSQL drivers, a memorybroker.Tx for the memory
// drivers) writes inside it: its task, chain, group or chord exists if and
// only if the transaction commits, where both drivers write inside it
// (driver.Transactor). A broker that cannot refuses the send with
// [ErrTxUnsupported], writing nothing; a backend that cannot writes the
// states outside the transaction, as without one.
//
// # Results
//
// [Server.SendTask] returns an [AsyncResult]; [Server.Result] makes one,
// from a task's UUID, in a process that did not send the task. [AsyncResult.Get] and
// [AsyncResult.GetInto] block until SUCCESS or FAILURE without spinning:
// woken by the backend where it can notify, otherwise polling with a backoff
// from 2ms to 200ms. An unknown or expired task returns [ErrTaskNotFound] at
// once, a failed task a [TaskError] with the recorded error text and kind
// (errors.Is and errors.As see the failure as the worker did: [ErrUnknownTask],
// [ArgumentError], [PanicError], ...), and a done ctx ctx.Err(). A [ChainAsyncResult] returns the last task's results (or
// the first failure), a [ChordAsyncResult] the callback's.
//
// # Drivers and URLs
//
// Each driver is a package named after what it is; those with third-party
// dependencies are Go modules of their own, so a build pays only for the
// drivers it imports:
//
//	import path                                   package          URL schemes
//	github.com/errand-go/errand/brokers/memory    memorybroker     memory://       (this module)
//	github.com/errand-go/errand/brokers/redis     redisbroker      redis://, rediss://, redis-sentinel://, rediss-sentinel://
//	github.com/errand-go/errand/brokers/sqs       sqsbroker        sqs://
//	github.com/errand-go/errand/brokers/amqp      amqpbroker       amqp://, amqps://
//	github.com/errand-go/errand/brokers/postgres  postgresbroker   postgres://, postgresql://
//	github.com/errand-go/errand/backends/memory   memorybackend    memory://       (this module)
//	github.com/errand-go/errand/backends/redis    redisbackend     redis://, rediss://, redis-sentinel://, rediss-sentinel://
//	github.com/errand-go/errand/backends/mongo    mongobackend     mongodb://, mongodb+srv://
//	github.com/errand-go/errand/backends/memcache memcachebackend  memcache://
//	github.com/errand-go/errand/backends/postgres postgresbackend  postgres://, postgresql://
//
// A driver's constructor, New, takes an *Options and, for most drivers, an
// injected client (the AMQP broker takes a URL, the MongoDB backend also a
// ctx, and returns an error; the README's drivers table gives each); pass
// its value to [Config]. Or, database/sql style, open drivers by URL:
// importing a driver registers its schemes, and [OpenBroker] and
// [OpenBackend] find them:
//
//	import _ "github.com/errand-go/errand/brokers/redis"
//
//	broker, err := errand.OpenBroker(ctx, "redis://:secret@127.0.0.1:6379/0")
//
// Secrets in URLs are never printed or logged: an [OpenError] shows the URL
// redacted, and [RedactURL] does the same for URLs you print yourself. Each
// driver's package documentation gives its URL form, delivery semantics and
// limits.
//
// # The portable layer
//
// Every broker and backend a [Server] uses — the driver's own value, from
// its New or from [OpenBroker] and [OpenBackend], given in [Config] — is
// wrapped by [NewServer] in errand's portable layer, so these hold
// whatever the driver:
//
//   - after Close, every call returns an error satisfying
//     errors.Is(err, [ErrClosed]) without reaching the driver, and the
//     driver is closed once;
//   - a call whose ctx is already done returns ctx.Err() without reaching
//     the driver, and an error returned while ctx is done satisfies
//     errors.Is(err, ctx.Err()) whatever the driver wrapped;
//   - a message larger than the broker's declared maximum is refused with a
//     [PayloadError] before anything of its batch is sent;
//   - the acks of concurrent tasks on one queue share the broker's
//     batch-shaped Ack calls (on every broker), up to the broker's batch
//     size, and their attempt starts and state writes share the backend's
//     batch calls, each item answered on its own; a lone call is sent at
//     once, never held back to fill a batch;
//   - errors of [OpenBroker] and [OpenBackend] hide the URL's secrets and
//     still satisfy errors.Is and errors.As for what the driver returned;
//   - a capability the driver lacks is an error satisfying
//     errors.Is(err, errors.ErrUnsupported), never a silent no-op.
//
// [Server.Broker] and [Server.Backend] return the drivers the server was
// given, unwrapped: a type assertion to the driver's own type works, and
// calls on them skip the layer. Each Server wraps the drivers it is given
// in its own layer, and [Server.Close] closes the drivers themselves: when
// several Servers share one driver value, close one of them only once all
// are done.
//
// # Operating
//
// Every operator call is a method of [Server], the same calls the errand
// command and the web dashboard make:
//
//   - [Server.Queues] lists the broker's queues, each a [QueueInfo] (its
//     [QueueStats] counts, whether it is paused, its archive's size);
//     [Server.Queue] answers for one queue: a queue that has been used
//     answers its counts however idle it is, and [ErrUnknownQueue] is for
//     a name the broker has never seen;
//   - [Server.List] pages through a queue's tasks in one list
//     ([ListPending], [ListScheduled], [ListRetrying], [ListInFlight],
//     [ListArchived], [ListCompleted]; [ListStates] gives them all), each
//     a [QueuedTask] with its decoded signature and backend state;
//   - [Server.Task] finds one task on its queue, or in the backend alone;
//     [Server.ArchivedTask] one task of the archive, with its reason and
//     last error ([ErrNotArchived] when it is not there);
//   - [Server.Requeue] and [Server.RequeueAll] send archived tasks again as
//     fresh attempts; [Server.DeleteArchived] and
//     [Server.DeleteAllArchived] drop them;
//   - [Server.Purge] drops a queue's pending and scheduled tasks;
//   - [Server.Pause] and [Server.Resume] stop and restart fetching of a
//     queue by every worker of every process; [Server.Paused] lists the
//     paused queues;
//   - [Server.Workers] lists the live workers of every process, from their
//     heartbeats;
//   - [Server.Result] is a handle on a task's outcome from its UUID alone.
//
// Each needs an optional capability of the broker (the driver package's
// Archiver, Lister, QueueLister, StatsReporter, Purger, Pauser or
// Heartbeater) and returns an error satisfying errors.Is(err,
// errors.ErrUnsupported) without it. A task that fails for good, and a
// message a worker cannot run (its reason wrapping [ErrBadMessage],
// [ErrUnknownTask], ...), is set aside in the queue's archive
// ([ListArchived]) where the broker keeps one.
//
// # Errors
//
// Test sentinels with [errors.Is]: [ErrClosed], [ErrTaskNotFound],
// [ErrNotArchived] and [ErrPayloadTooLarge] are the driver package's own
// values, so drivers' errors match them; [ErrUnknownTask],
// [ErrBadArguments], [ErrBadMessage] and [ErrUUIDConflict] are wrapped by
// recorded failures and set-aside reasons. Error types, found with [errors.As]: [PayloadError],
// [ArgumentError], [TaskError] (a task's recorded failure, with its
// [ErrorKind]), [PanicError], [OpenError], and the two a function returns
// to steer retries, [RetryLaterError] and [PermanentError]. A producer's
// [TaskError] unwraps to the failure rebuilt from its recorded kind and
// detail, so [ErrUnknownTask], [ErrBadArguments], [ErrRetriesExhausted],
// context.DeadlineExceeded (a task timeout), [ArgumentError], [PanicError]
// and [PermanentError] are found on it as on the worker.
//
// # Signed messages
//
// With [Config.Signing] a server signs every message it publishes with
// HMAC-SHA256 under a key id, and its workers verify signatures before
// decoding: with [Signing.Require], an unsigned or forged message is set
// aside with a reason wrapping [ErrBadSignature] and never runs. Keys are
// shared through configuration and rotate by id (docs/security.md).
package errand

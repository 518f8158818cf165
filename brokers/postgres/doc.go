// Package postgresbroker is errand's PostgreSQL broker, on pgx v5: the
// queue is a table of the application's own database, so a task can be
// sent inside the application's own transaction (errand.WithTx) and
// exists if and only if that transaction commits.
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db/app")
//	_ = postgresbroker.Migrate(ctx, pool, "errand") // once, or errand migrate
//	b, err := postgresbroker.New(ctx, pool, nil)
//
// New takes the application's own *pgxpool.Pool (Close leaves it open)
// and checks that the schema is at this build's version: an error
// wrapping ErrNoSchema, ErrSchemaOld or ErrSchemaNew otherwise. The
// tables are created only by an explicit Migrate (or errand migrate),
// never on open.
//
// # URL form
//
//	postgres://user:password@host:5432/database?schema=errand&timeout=10s
//	postgresql://...
//
// Open makes a pool of its own from the URL, which Close closes. errand's
// parameters: schema (Options.Schema, default errand), timeout
// (Options.CallTimeout), max_payload (Options.MaxPayload, bytes; negative:
// no limit), poll_interval (Options.PollInterval). Every other parameter
// is pgx's (pgxpool.ParseConfig: pool_max_conns, sslmode, ...). The
// password never appears in errors errand returns.
//
// # Delivery semantics
//
// At least once. A message is a row of the table messages; Fetch leases
// rows with one UPDATE ... FOR UPDATE SKIP LOCKED statement (concurrent
// consumers take different rows without waiting on each other), and a
// leased row whose lease lapses (its worker died) is delivered again, its
// Attempt one higher. Ack deletes the rows in one statement, only while
// still leased under the delivery's token (else driver.ErrLeaseLost):
// acked rows do not stay in the table (the same statement keeps the
// newest CompletedMax of each queue in the table completed, see
// Operators). Reject moves a row to the table archive.
//
// Order: due messages of a queue go highest Message.Priority first, then
// by ETA, then in publish order. A message released at once keeps its
// place. Of the messages that waited for a time (delayed, released for
// later, or whose lease lapsed), a Fetch considers the limit earliest
// due: when more than that became due at once, due time, not priority,
// picks which are delivered first.
//
// Delays: a message is never delivered before its NotBefore. The delay is
// measured on the producer's clock when it publishes and counted on the
// server's from then on; every due time and lease deadline is compared
// with the server's clock, never a worker's. A blocked Fetch wakes at
// the due time of its queue's next delayed message (or lapsing lease),
// so a delayed message is late by a statement's round trip, not a poll.
// There is no maximum delay.
//
// Wake-ups: Publish notifies the queue's consumers in the same statement
// (pg_notify on the channel "errand.<schema>", payload the queue; inside
// a transaction the notification waits for its commit), and each Broker
// holds one listening connection of its own that wakes its blocked Fetch
// calls at once. Outside a transaction a broker notifies a queue at most
// once a millisecond (a NOTIFY makes commits queue up behind a
// server-wide lock): a publish within that millisecond is notified by
// one trailing notification when it ends, so a consumer elsewhere hears
// of it at most a millisecond late; the publishing broker's own blocked
// fetches are woken at once. Options.PollInterval (default 1s) bounds a
// wait when a notification was lost (the listening connection broke).
//
// Faults: every statement is bounded by Options.CallTimeout (default
// 10s) when the caller's ctx has no earlier deadline, so a server that
// stops answering fails calls instead of hanging them. Errors say what
// happened: ErrPoolFull (no pool connection came free in time),
// ErrStatementTimeout (statement_timeout canceled a statement),
// ErrConnection (a connection failed or was lost; the pool replaces it,
// and Fetch tries again at once). The queue survives a server restart:
// messages are rows, committed before Publish returns.
//
// # Cancel notices
//
// The broker is a driver.CancelNotifier. NotifyCancel is one statement
// of pg_notify on the channel "errand_cancel:<schema>" (a hash of the
// schema when that is over 63 bytes), each payload a JSON array of task
// UUIDs up to 7999 bytes (a long list takes several). ListenCancel
// listens on the broker's one listening connection, the one that wakes
// its fetches (started by it when no Fetch has), which LISTENs on both
// channels and reconnects after a failure; notices sent while it is away
// are lost, and errand finds the cancel at the task's next lease
// extension. Close ends every ListenCancel.
//
// # Operators
//
// The broker is every optional capability of package driver, each call
// one statement, on the tables of internal/pgdb's brokerOpsV1 and the
// core's:
//
//   - Archiver: what fails for good is a row of archive (Archive moves
//     the delivery's row there under its lease token, like Ack). Archive
//     also trims the queue's archive to its driver.Retention in the same
//     statement, at most ArchiveTrimBatch rows of each bound a call.
//     Archived lists bodies cut to ArchivePreview bytes (Size: the whole
//     body's); ArchivedEntry reads one whole. Requeue deletes the entry and
//     inserts the message in one statement (of racing Requeues one wins).
//   - Lister, Finder, StatsReporter, Purger, QueueLister, QueueKnower:
//     counts and listings read the queue's rows through the partial
//     indexes of messages (O(the queue's length): an operator's call). The
//     ack statement keeps the acked messages in completed, trimmed to the
//     newest CompletedMax (1000) of each queue: every CompletedTrimEvery-th
//     ack deletes up to CompletedTrimBatch older rows of its queue and
//     counts them, so Stats.Completed counts every ack. Purge deletes in
//     batches, never a message in flight; a purged queue stays known.
//   - Pauser: a row of pauses. Fetch itself takes nothing of a paused
//     queue (not only errand's workers, which poll Paused); Resume wakes
//     the queue's waiting fetches.
//   - Uniquer: a row of unique_keys per key with its holder and expiry on
//     the server's clock, taken or renewed in one INSERT ... ON CONFLICT.
//     Lock and Unlock run in the caller's transaction when the send has
//     one (errand.WithTx): a key taken there is held for others once it
//     commits, free again if it rolls back, and another Lock of that key
//     waits for it to end.
//   - RateLimiter: a token bucket per key, a row of rate_buckets taken
//     from in one statement on the server's clock (the Redis broker's
//     arithmetic: refused callers are spread 1/rate apart).
//   - ScheduleStore: a row of schedules per schedule, its definition and
//     latest claimed tick; ClaimTick is one conditional UPDATE.
//   - Heartbeater: a row of heartbeats per worker, until its ttl.
//
// Retention: expired unique keys, full rate buckets and heartbeats of
// workers gone without Unbeat are invisible to reads, and deleted by a
// sweep that a Broker's own calls run (Beat, every worker's heartbeat,
// above all; also Lock and Take), at most once every SweepEvery (10s), at
// most SweepBatch (1000) rows of each table a statement, skipping locked
// rows. Schedules and pauses stay until deleted or resumed.
//
// # With the PostgreSQL backend
//
// A broker and errand's PostgreSQL result backend (package
// postgresbackend) on one database and schema are co-located
// (driver.Colocator): Colocate answers for a backend whose Location is a
// *pgdb.Location Same as the broker's pool and Options.Schema (the same
// pool, or pools of the same host, port, database and user), and errand
// then takes one statement where it would take two, each writing the
// messages and the states atomically, in the backend's layout (its
// function set_states's statement and its function start_states):
//
//   - a send publishes and writes PENDING (where a task has no state) in
//     one statement, inside the caller's transaction when it has one:
//     the messages and their states exist only once it commits;
//   - a fetch leases and begins the attempts of the tasks the worker can
//     run (STARTED at the statement's time, by driver.Starter's table);
//   - the settle of a quiet success writes SUCCESS and acks in one
//     statement (a lost lease: the state written, ErrLeaseLost), the
//     acked rows kept in completed as Ack's are.
//
// A CANCELLED task (the backend is a driver.Canceller) is never started
// by the fetch (delivered with its start not written, the CANCELLED as
// its previous state), and its settle acks the delivery without writing
// over the CANCELLED, answering an error wrapping driver.ErrCancelled:
// checks inside the statements above, none of their own.
//
// A backend in another schema or database, or another backend, takes the
// portable path: the same outcome in two statements.
//
// # Limits
//
// A body is at most Options.MaxPayload bytes (DefaultMaxPayload, 16 MiB,
// by default; bytea itself stops at 1 GB). A NOTIFY payload is the queue
// name: queue names must be shorter than 8000 bytes. The broker declares
// Limits().MaxAckFlights 1: errand keeps one ack (or co-located settle)
// statement of a queue in flight, and the acks that come meanwhile go
// together in the next, so a busy queue commits many tasks a
// transaction.
package postgresbroker

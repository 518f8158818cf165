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
// acked rows do not stay in the table. Reject moves a row to the table
// archive.
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
// # Limits
//
// A body is at most Options.MaxPayload bytes (DefaultMaxPayload, 16 MiB,
// by default; bytea itself stops at 1 GB). A NOTIFY payload is the queue
// name: queue names must be shorter than 8000 bytes.
package postgresbroker

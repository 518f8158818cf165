// Package postgresbackend is errand's PostgreSQL result backend, on pgx
// v5 (github.com/jackc/pgx/v5) and the application's own *pgxpool.Pool.
//
// # URL form
//
//	postgres://[user[:password]@]host[:port]/database[?param=value&...]
//	postgresql://...                              the same
//
// errand's own parameters, removed before the rest goes to
// pgxpool.ParseConfig (pgx's own, such as pool_max_conns, and server
// run-time parameters, such as statement_timeout, pass through):
//
//	schema=errand               Options.Schema
//	result_expiry=1h            Options.ResultExpiry
//	group_expiry=24h            Options.GroupExpiry
//	timeout=10s                 Options.CallTimeout, per call
//	retention_interval=30s      Options.RetentionInterval
//	retention_batch=1000        Options.RetentionBatch
//	poll_interval=1s            Options.PollInterval
//
// Import the package (github.com/errand-go/errand/backends/postgres) for
// its side effect to register both schemes with errand.OpenBackend; Open
// makes a pool of its own, which Close closes. New takes the
// application's pool instead and never closes it. Neither creates the
// schema: run [Migrate] (or errand migrate) once per deployment; New and
// Open check its version and answer [ErrNoSchema], [ErrSchemaOld] or
// [ErrSchemaNew] (in a *pgdb.SchemaError) when it is not this build's.
// Passwords never appear in errors (errand.RedactURL hides them in logs).
//
// # Storage
//
// The tables live in one schema (Options.Schema) shared with errand's
// PostgreSQL broker, one version for both (internal/pgdb):
//
//   - states: one row per task, its current state: task name, state and
//     attempt as columns, its three times as timestamptz (microseconds,
//     the resolution errand records at), its Progress as text (the JSON
//     as the task gave it, returned byte for byte), the rest as JSON
//     text, and expires_at, ResultExpiry after its last write;
//   - groups: one row per group: members in group order, size, how many
//     are done, the chord's claimer, expires_at (GroupExpiry after its
//     creation and after each completion);
//   - group_members: one row per member, done once counted.
//
// Every call is one statement; the state writes are three functions of
// the schema (set_states, start_states, cancel_states), the first two of
// which the broker calls too when it co-locates with the backend.
//
// # Workflow primitives
//
//   - CompleteGroupMember is one statement: the member's row turns done
//     once (a redelivered member adds nothing), and the group's count
//     grows by what that added, only for a member of a live group
//     ([driver.ErrNotMember] otherwise, nothing changed): idempotent,
//     member-only, O(1).
//   - ClaimChord is one UPDATE storing the first claimer (coalesce): the
//     server serialises claims on the group's row, so exactly one claimer
//     wins, and wins again.
//   - GroupStates is one query joining the member list to the states.
//   - Start ([driver.Starter]) is one call of start_states for the batch:
//     per request, the state's row is read FOR UPDATE, driver.Starter's
//     table decides, and STARTED is written with the previous CreatedAt
//     and a StartedAt no earlier than it. Two racing starts of a task
//     without a state: one inserts, the other meets the conflict and
//     reads the winner's row. Requests are sent in UUID order so that two
//     batches lock their common rows in one order.
//   - SetPendingIfAbsent ([driver.PendingWriter]) is INSERT ... ON
//     CONFLICT that leaves a live row alone (an expired one counts as
//     none).
//
// # Cancel
//
// The backend is a [driver.Canceller]. Cancel is one call of
// cancel_states for the batch (in UUID order, as Start's): per task,
// its live row is read FOR UPDATE and, unless the task has none or its
// state is SUCCESS, FAILURE or CANCELLED, CANCELLED is written with the
// canceller's error, keeping the task's name, attempt, CreatedAt,
// StartedAt and progress, with a FinishedAt no earlier than them. The
// cancel is kept: SetStates (and a co-located settle) writes nothing
// but a PENDING over a live CANCELLED, answering an error wrapping
// [driver.ErrCancelled] for each state it refused (the batch's others
// are written, in the same statement: the check is a condition of its
// upsert), and Start refuses it as any terminal state.
//
// # Transactions
//
// The backend is a [driver.Transactor]: CheckTx accepts a pgx.Tx on the
// pool's server, database and user, and a *sql.Tx of pgx's stdlib
// driver. SetStates, SetPendingIfAbsent and InitGroup whose ctx carries
// the transaction (errand.WithTx) write inside it, one statement each:
// the PENDING states and groups of a send exist if and only if it
// commits. Every other call ignores it.
//
// # Waiting for results
//
// Every write of a SUCCESS, FAILURE or CANCELLED notifies the channel
// errand_states:SCHEMA (pg_notify, delivered at commit) with the task's
// UUID; the writes of other states notify nothing, since a commit that
// notifies takes a lock every notifying commit of the database shares.
// WaitState ([driver.StateWaiter]) registers with one listening
// connection per backend (outside the pool, opened by the first waiter,
// opened again within a second when lost), reads the state, and reads it
// again when notified, and when that connection (re)connects; when no
// notification comes within PollInterval (a wait for another state, a
// notification lost while that connection was down) it reads anyway. A
// read that fails (the server restarting) is tried again at the next
// wake-up.
//
// # Retention
//
// A state is absent to every read once its expires_at has passed, and a
// write replaces it as if there were none. The rows themselves are
// removed by a sweep each backend runs every RetentionInterval (default
// 30s): DELETE statements of at most RetentionBatch rows each (default
// 1000), on the expires_at index, skipping rows a writer holds (FOR
// UPDATE SKIP LOCKED), first expired states, then the member rows of
// expired groups, then those groups, until a statement deletes fewer
// than a batch. No statement holds more than a batch of row locks or
// runs longer than a batch's delete, so workers are never blocked behind
// it, and autovacuum at its defaults reclaims the space. Several
// backends on one schema sweep without contention; with
// RetentionInterval negative, a backend never sweeps.
//
// # Errors
//
// Each call without an earlier ctx deadline is bounded by CallTimeout
// (default 10s), the wait for a free connection of the pool included. A
// statement cancelled by the server's statement_timeout (SQLSTATE 57014),
// a pool with every connection in use until the ctx ended, and a closed
// backend ([driver.ErrClosed]) each get an error saying so.
//
// # Limits
//
// A state's results are stored as JSON text (no size limit beyond
// PostgreSQL's 1 GB per value; keep results small). Times are kept to the
// microsecond. A group's members are one array in its row. WaitState's
// listening connection needs a session of its own: behind a pooler in
// transaction mode (PgBouncer) notifications do not arrive, and waiters
// fall back to their poll.
package postgresbackend

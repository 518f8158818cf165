package postgresbroker

import (
	"strconv"
	"strings"

	"github.com/errand-go/errand/internal/pgdb"
)

// statements are the broker's SQL, one statement per call, built once for
// its schema (pgx prepares and caches each on a connection the first time
// it runs there). The columns are described in internal/pgdb's
// schema_broker.go. Every time is the server's: a delay or lease is
// passed as microseconds and added to clock_timestamp() or now(), so the
// clocks of producers and workers decide nothing.
type statements struct {
	publish, notify, fetch, nextDue, ack, extend, release, reject string
}

func newStatements(schema string) statements {
	r := sqlNames(schema)
	return statements{
		// $1 queues, $2 IDs, $3 bodies, $4 priorities, $5 tasks, $6 task
		// attempts, $7 delays in µs (0: due now), $8 the NOTIFY channel,
		// $9 the queues to notify (see notify.go). Rows are inserted in the
		// order given (ordinality), so ids are in publish order. Inside a
		// caller's transaction, the rows and the notifications both wait
		// for its commit.
		publish: r.Replace("\nWITH " + publishRows + `
SELECT pg_notify($8, q) FROM unnest($9::text[]) q`),

		// $1 the NOTIFY channel, $2 queues: a notification of its own,
		// for publishes whose statement left it out (notify.go).
		notify: `SELECT pg_notify($1, q) FROM unnest($2::text[]) q`,

		// $1 queue, $2 limit, $3 lease in µs. The candidates are the
		// first ready rows by priority and publish order, and the first
		// rows whose due time passed (delayed messages due now, lapsed
		// leases) by due time: each an exact range of its partial index,
		// locked with SKIP LOCKED so concurrent fetches take different
		// rows without waiting. Of those, the limit highest priority,
		// earliest ETA rows are leased: in flight until the deadline, and
		// counted as one more delivery (the new lease token).
		fetch: r.Replace("\nWITH " + fetchCandidates + "\n" + fetchLease),

		// $1 queue: how long until the queue's next timed row is due (a
		// delayed message, a lease lapsing), in µs of the server's clock;
		// NULL when it has none.
		nextDue: r.Replace(`
SELECT (extract(epoch FROM min(due) - clock_timestamp()) * 1000000)::int8
FROM {messages} WHERE queue = $1 AND NOT ready
	AND NOT EXISTS (SELECT 1 FROM {pauses} WHERE queue = $1) -- capabilities: paused, nothing is due (pause.go)`),

		// $1 ids, $2 deliveries (the lease tokens): the rows still leased
		// under those tokens are deleted; the ids returned are the acked
		// ones, any other lost its lease.
		// Capabilities (list.go): the same statement keeps the acked
		// messages in completed (ackedToCompleted).
		ack: r.Replace(`
WITH acked AS (
	DELETE FROM {messages} m
	USING unnest($1::int8[], $2::int4[]) AS a(id, n)
	WHERE m.id = a.id AND m.deliveries = a.n AND m.leased
	RETURNING m.id, m.queue, m.msg_id, m.body, m.priority, m.task, m.task_attempt
)` + ackedToCompleted + `
SELECT id FROM acked`),

		// $1 id, $2 deliveries, $3 lease in µs.
		extend: r.Replace(`
UPDATE {messages} SET due = clock_timestamp() + $3 * interval '1 microsecond'
WHERE id = $1 AND deliveries = $2 AND leased`),

		// $1 id, $2 deliveries, $3 delay in µs (0: at once, keeping the
		// message's place: its eta and id), $4 the NOTIFY channel.
		release: r.Replace(`
WITH u AS (
	UPDATE {messages} m
	SET leased = false, ready = $3 <= 0,
		eta = CASE WHEN $3 > 0 THEN x.at ELSE m.eta END,
		due = CASE WHEN $3 > 0 THEN x.at ELSE m.eta END
	FROM (SELECT clock_timestamp() + $3 * interval '1 microsecond' AS at) x
	WHERE m.id = $1 AND m.deliveries = $2 AND m.leased
	RETURNING m.queue
)
SELECT pg_notify($4, queue) FROM u`),

		// $1 id, $2 deliveries, $3 reason: the row leaves the queue for
		// the archive in one statement (replacing an entry of the same
		// queue and ID).
		reject: r.Replace(`
WITH gone AS (
	DELETE FROM {messages} WHERE id = $1 AND deliveries = $2 AND leased
	RETURNING queue, msg_id, body, priority, task, task_attempt, deliveries
)
INSERT INTO {archive} AS a (queue, msg_id, body, priority, task, task_attempt, reason, attempts)
SELECT queue, msg_id, body, priority, task, task_attempt, $3, deliveries FROM gone
ON CONFLICT (queue, msg_id) DO UPDATE SET body = excluded.body, priority = excluded.priority,
	task = excluded.task, task_attempt = excluded.task_attempt, reason = excluded.reason,
	error = '', attempts = excluded.attempts, size = 0, archived_at = clock_timestamp()`),
	}
}

// publishRows is the publish statement's CTE ins, inserting the rows of
// $1 to $7 (the co-located send's statement has it too: colocation.go).
const publishRows = `ins AS (
	INSERT INTO {messages} (queue, msg_id, body, priority, task, task_attempt, eta, ready, due)
	SELECT q, i, b, p, t, a, e, d <= 0, e
	FROM (
		SELECT q, i, b, p, t, a, d,
			CASE WHEN d > 0 THEN clock_timestamp() + d * interval '1 microsecond' ELSE now() END AS e, o
		FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int2[], $5::text[], $6::int4[], $7::int8[])
			WITH ORDINALITY AS u(q, i, b, p, t, a, d, o)
	) v
	ORDER BY o
)`

// fetchCandidates are the fetch statement's CTEs, p the rows to lease
// ($1 queue, $2 limit), and fetchLease its UPDATE leasing them ($3 the
// lease in µs), RETURNING what a delivery is made of (the co-located
// fetch's statement has both: colocation.go).
const (
	fetchCandidates = `r AS (
	SELECT id, priority, eta FROM {messages}
	WHERE queue = $1 AND ready
		AND NOT EXISTS (SELECT 1 FROM {pauses} WHERE queue = $1) -- capabilities: a paused queue (pause.go)
	ORDER BY priority DESC, id LIMIT $2
	FOR UPDATE SKIP LOCKED
), t AS (
	SELECT id, priority, eta FROM {messages}
	WHERE queue = $1 AND NOT ready AND due <= now()
		AND NOT EXISTS (SELECT 1 FROM {pauses} WHERE queue = $1) -- capabilities: a paused queue (pause.go)
	ORDER BY due LIMIT $2
	FOR UPDATE SKIP LOCKED
), p AS (
	SELECT id FROM (SELECT * FROM r UNION ALL SELECT * FROM t) c
	ORDER BY priority DESC, eta, id LIMIT $2
)`
	fetchLease = `UPDATE {messages} m
SET ready = false, leased = true, deliveries = m.deliveries + 1,
	due = clock_timestamp() + $3 * interval '1 microsecond'
FROM p WHERE m.id = p.id
RETURNING m.id, m.msg_id, m.body, m.priority, m.task, m.task_attempt, m.deliveries, m.eta`
)

// sqlNames replaces the names in braces of the broker's statements with
// schema's tables and the capabilities' bounds.
func sqlNames(schema string) *strings.Replacer {
	return strings.NewReplacer(
		"{messages}", pgdb.Table(schema, "messages"),
		"{archive}", pgdb.Table(schema, "archive"),
		// The capabilities' tables and bounds (ack, fetch, nextDue).
		"{completed}", pgdb.Table(schema, "completed"),
		"{queues}", pgdb.Table(schema, "queues"),
		"{pauses}", pgdb.Table(schema, "pauses"),
		"{completed_keep}", strconv.Itoa(CompletedMax),
		"{completed_every}", strconv.Itoa(CompletedTrimEvery),
		"{completed_trim}", strconv.Itoa(CompletedTrimBatch),
	)
}

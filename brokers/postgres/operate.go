package postgresbroker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
)

var (
	_ driver.Purger        = (*Broker)(nil)
	_ driver.StatsReporter = (*Broker)(nil)
	_ driver.QueueLister   = (*Broker)(nil)
	_ driver.QueueKnower   = (*Broker)(nil)
)

// Counting, purging and listing queues. A queue's rows of messages are in
// exactly one state (internal/pgdb's schema_broker.go), by the server's
// clock now:
//
//	pending    ready, or not ready and due (a delayed message due now, a
//	           lapsed lease)
//	delayed    not ready, not leased, due later
//	in flight  leased, due (the lease deadline) later
//
// Each count or listing reads one partial index of messages (ready, or
// not ready) over the queue's rows: O(the queue's length), an operator's
// call, never a worker's.

const (
	// statsSQL: $1 queue. Pending, delayed, in flight, archived (Dead),
	// and acks since the queue began (the trimmed count plus the queue's
	// completed rows, one snapshot).
	statsSQL = `
SELECT
	(SELECT count(*) FROM {messages} WHERE queue = $1 AND ready)
		+ (SELECT count(*) FROM {messages} WHERE queue = $1 AND NOT ready AND due <= clock_timestamp()),
	(SELECT count(*) FROM {messages} WHERE queue = $1 AND NOT ready AND NOT leased AND due > clock_timestamp()),
	(SELECT count(*) FROM {messages} WHERE queue = $1 AND NOT ready AND leased AND due > clock_timestamp()),
	(SELECT count(*) FROM {archive} WHERE queue = $1),
	(SELECT count(*) FROM {completed} WHERE queue = $1)
		+ coalesce((SELECT trimmed FROM {queues} WHERE name = $1), 0)`

	// purgeSQL deletes up to {batch} pending and up to {batch} delayed
	// rows of queue $1 (never one in flight), and records the queue as
	// known; returns how many it deleted.
	purgeSQL = `
WITH d AS (
	DELETE FROM {messages} WHERE id IN (
		(SELECT id FROM {messages} WHERE queue = $1 AND ready LIMIT {batch})
		UNION ALL
		(SELECT id FROM {messages} WHERE queue = $1 AND NOT ready
			AND NOT (leased AND due > clock_timestamp()) LIMIT {batch}))
		AND NOT (leased AND due > clock_timestamp()) -- checked again on a row a fetch took meanwhile
	RETURNING 1
), known AS (
	INSERT INTO {queues} (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
)
SELECT count(*) FROM d`

	// queuesSQL lists every queue with a row in messages, archive or
	// completed, or purged once (a row of queues), each found by a skip
	// scan of an index (one probe a queue, not a row a message).
	queuesSQL = `
WITH RECURSIVE r AS (
	(SELECT queue FROM {messages} WHERE ready ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT queue FROM {messages} WHERE ready AND queue > r.queue ORDER BY queue LIMIT 1)
	FROM r WHERE r.queue IS NOT NULL
), n AS (
	(SELECT queue FROM {messages} WHERE NOT ready ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT queue FROM {messages} WHERE NOT ready AND queue > n.queue ORDER BY queue LIMIT 1)
	FROM n WHERE n.queue IS NOT NULL
), a AS (
	(SELECT queue FROM {archive} ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT queue FROM {archive} WHERE queue > a.queue ORDER BY queue LIMIT 1)
	FROM a WHERE a.queue IS NOT NULL
), c AS (
	(SELECT queue FROM {completed} ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT queue FROM {completed} WHERE queue > c.queue ORDER BY queue LIMIT 1)
	FROM c WHERE c.queue IS NOT NULL
)
SELECT queue FROM (
	SELECT queue FROM r UNION SELECT queue FROM n UNION SELECT queue FROM a
	UNION SELECT queue FROM c UNION SELECT name FROM {queues}
) q WHERE queue IS NOT NULL ORDER BY queue`

	// knowsQueueSQL: $1 queue; one index probe per table.
	knowsQueueSQL = `
SELECT EXISTS (SELECT 1 FROM {messages} WHERE queue = $1 AND ready)
	OR EXISTS (SELECT 1 FROM {messages} WHERE queue = $1 AND NOT ready)
	OR EXISTS (SELECT 1 FROM {archive} WHERE queue = $1)
	OR EXISTS (SELECT 1 FROM {completed} WHERE queue = $1)
	OR EXISTS (SELECT 1 FROM {queues} WHERE name = $1)`
)

// Purge deletes every pending and delayed message of queue, a batch of
// at most 2×SweepBatch rows a statement (so workers are never held up by
// one long DELETE), and returns how many. Messages in flight stay. The
// queue stays known (KnowsQueue, Queues) however empty.
func (b *Broker) Purge(ctx context.Context, queue string) (int, error) {
	total := 0
	for {
		var n int64
		if _, err := b.opsRow(ctx, pgxWriter(b), "purge", b.opsSQL().purge, []any{queue}, &n); err != nil {
			return total, err
		}
		total += int(n)
		if n == 0 {
			return total, nil
		}
	}
}

// Stats counts queue in one statement (one snapshot).
func (b *Broker) Stats(ctx context.Context, queue string) (driver.QueueStats, error) {
	var st driver.QueueStats
	var pending, delayed, inflight, dead int64
	_, err := b.opsRow(ctx, pgxWriter(b), "stats", b.opsSQL().stats, []any{queue}, &pending, &delayed, &inflight, &dead, &st.Completed)
	st.Pending, st.Delayed, st.InFlight, st.Dead = int(pending), int(delayed), int(inflight), int(dead)
	return st, err
}

// Queues lists every queue a message was published to that still holds
// something (a message queued, delayed or in flight, an archived entry,
// a completed message kept: each queue keeps its last CompletedMax), and
// every queue purged, by name.
func (b *Broker) Queues(ctx context.Context) ([]string, error) {
	return opsRows(ctx, b, "list queues", b.opsSQL().queues, pgx.RowTo[string])
}

// KnowsQueue reports whether Queues lists queue, with one index probe per
// table instead of listing them all.
func (b *Broker) KnowsQueue(ctx context.Context, queue string) (bool, error) {
	var ok bool
	_, err := b.opsRow(ctx, pgxWriter(b), "knows queue", b.opsSQL().knowsQueue, []any{queue}, &ok)
	return ok, err
}

package postgresbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
)

var (
	_ driver.Lister = (*Broker)(nil)
	_ driver.Finder = (*Broker)(nil)
)

// Listing a queue by state (driver.Lister) and finding one message
// (driver.Finder). Pending, delayed and in-flight messages are rows of
// messages (states as in operate.go); completed ones are rows of
// completed, which the ack statement writes in the same statement as it
// deletes the acked rows, keeping the newest CompletedMax of each queue:
// every CompletedTrimEvery-th ack (by the completed table's sequence)
// also deletes up to CompletedTrimBatch of its queue's rows past the
// newest CompletedMax, oldest first, and adds how many to the queue's
// trimmed count (Stats.Completed = trimmed + the rows kept). So the
// table holds about CompletedMax rows a queue, never a row per task.

const (
	// CompletedMax is how many of its most recently acked messages each
	// queue keeps for ListCompleted (IDs and bodies): 1000, like the
	// Redis broker's default.
	CompletedMax = 1000
	// CompletedTrimEvery and CompletedTrimBatch: how often an ack trims
	// its queue's completed rows, and the most it deletes then.
	CompletedTrimEvery = 64
	CompletedTrimBatch = 256
)

// ackedToCompleted is the part of an ack statement that keeps what it
// acked in completed: appended to a WITH whose CTE acked is the DELETE of
// the acked rows of messages, RETURNING (at least) id, queue, msg_id,
// body, priority, task and task_attempt. Every statement that acks rows
// of messages (Ack; a co-located settle) must carry it, or List, Find and
// Stats.Completed miss those acks. An ack whose completed row's seq is a
// multiple of CompletedTrimEvery trims its queue's completed rows past
// the newest CompletedMax (at most CompletedTrimBatch, oldest first,
// skipping rows another ack is trimming), counting them in
// queues.trimmed.
const ackedToCompleted = `, done AS (
	INSERT INTO {completed} (queue, msg_id, body, priority, task, task_attempt)
	SELECT queue, msg_id, body, priority, task, task_attempt FROM acked ORDER BY id
	RETURNING queue, seq
), trimmed AS (
	DELETE FROM {completed} WHERE seq IN (
		SELECT o.seq FROM (SELECT DISTINCT queue FROM done WHERE seq % {completed_every} = 0) q
		CROSS JOIN LATERAL (
			SELECT seq FROM {completed}
			WHERE queue = q.queue AND seq < (
				SELECT seq FROM {completed} WHERE queue = q.queue
				ORDER BY seq DESC OFFSET {completed_keep} - 1 LIMIT 1)
			ORDER BY seq LIMIT {completed_trim}
			FOR UPDATE SKIP LOCKED) o)
	RETURNING queue
), counted AS (
	INSERT INTO {queues} AS k (name, trimmed)
	SELECT queue, count(*) FROM trimmed GROUP BY queue
	ON CONFLICT (name) DO UPDATE SET trimmed = k.trimmed + excluded.trimmed
)`

const (
	// listPendingSQL: $1 queue, $2 offset, $3 limit; in fetch order
	// (priority, then ETA, then publish order).
	listPendingSQL = `
SELECT msg_id, body, priority, task, task_attempt, NULL::timestamptz FROM (
	(SELECT * FROM {messages} WHERE queue = $1 AND ready)
	UNION ALL
	(SELECT * FROM {messages} WHERE queue = $1 AND NOT ready AND due <= clock_timestamp())
) m ORDER BY priority DESC, eta, id OFFSET $2 LIMIT $3`
	// listScheduledSQL: by due time; At is when it is due.
	listScheduledSQL = `
SELECT msg_id, body, priority, task, task_attempt, due FROM {messages}
WHERE queue = $1 AND NOT ready AND NOT leased AND due > clock_timestamp()
ORDER BY due, id OFFSET $2 LIMIT $3`
	// listInFlightSQL: in publish order.
	listInFlightSQL = `
SELECT msg_id, body, priority, task, task_attempt, NULL::timestamptz FROM {messages}
WHERE queue = $1 AND NOT ready AND leased AND due > clock_timestamp()
ORDER BY id OFFSET $2 LIMIT $3`
	// listCompletedSQL: newest first; At is when it was acked.
	listCompletedSQL = `
SELECT msg_id, body, priority, task, task_attempt, acked_at FROM {completed}
WHERE queue = $1 ORDER BY seq DESC OFFSET $2 LIMIT $3`

	// findSQL: $1 queue, $2 message ID; the message in flight, else
	// pending, else scheduled, else the newest completed, with its state.
	findSQL = `
SELECT state, msg_id, body, priority, task, task_attempt, at FROM (
	SELECT CASE WHEN leased AND due > clock_timestamp() THEN 0
			WHEN ready OR due <= clock_timestamp() THEN 1 ELSE 2 END AS state,
		msg_id, body, priority, task, task_attempt, due AS at, id AS seq
	FROM (
		(SELECT * FROM {messages} WHERE queue = $1 AND ready AND msg_id = $2)
		UNION ALL
		(SELECT * FROM {messages} WHERE queue = $1 AND NOT ready AND msg_id = $2)
	) m
	UNION ALL
	(SELECT 3, msg_id, body, priority, task, task_attempt, acked_at, seq FROM {completed}
		WHERE queue = $1 AND msg_id = $2 ORDER BY seq DESC LIMIT 1)
) f ORDER BY state, seq LIMIT 1`
)

// findStates are findSQL's states, by number.
var findStates = [...]driver.ListState{driver.ListInFlight, driver.ListPending, driver.ListScheduled, driver.ListCompleted}

// scanListed reads a listing row (ID, body, priority, task, attempt, At)
// of queue.
func scanListed(queue string) pgx.RowToFunc[driver.Listed] {
	return func(row pgx.CollectableRow) (driver.Listed, error) {
		l := driver.Listed{Message: driver.Message{Queue: queue}}
		var prio int16
		var attempt int32
		var at *time.Time
		err := row.Scan(&l.ID, &l.Body, &prio, &l.Task, &attempt, &at)
		l.Priority, l.TaskAttempt = uint8(prio), int(attempt)
		if at != nil {
			l.At = *at
		}
		return l, err
	}
}

// List returns a page of queue's messages in state: pending in fetch
// order, in flight in publish order, scheduled by due time (At, and
// NotBefore, its due time), completed newest first (At: the ack) among
// the newest CompletedMax.
func (b *Broker) List(ctx context.Context, queue string, state driver.ListState, offset, limit int) ([]driver.Listed, error) {
	if offset < 0 || limit < 1 {
		return nil, fmt.Errorf("postgres broker: List: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	s := b.opsSQL()
	var sql string
	switch state {
	case driver.ListPending:
		sql = s.listPending
	case driver.ListScheduled:
		sql = s.listScheduled
	case driver.ListInFlight:
		sql = s.listInFlight
	case driver.ListCompleted:
		sql = s.listCompleted
	default:
		return nil, fmt.Errorf("postgres broker: List: unknown state %q (want %q, %q, %q or %q)", state,
			driver.ListPending, driver.ListScheduled, driver.ListInFlight, driver.ListCompleted)
	}
	ls, err := opsRows(ctx, b, "list "+string(state), sql, scanListed(queue), queue, int64(offset), int64(limit))
	if state == driver.ListScheduled {
		for i := range ls {
			ls[i].NotBefore = ls[i].At
		}
	}
	return ls, err
}

// Find returns the message of queue whose ID is id, looking in flight,
// then pending, then scheduled, then among the completed kept: one
// statement reading the queue's rows of messages with that ID (a filter
// over the queue's rows: O(the queue's length)) and its completed rows.
func (b *Broker) Find(ctx context.Context, queue, id string) (driver.Listed, driver.ListState, bool, error) {
	var state int32
	l := driver.Listed{Message: driver.Message{Queue: queue}}
	var prio int16
	var attempt int32
	var at time.Time
	found, err := b.opsRow(ctx, pgxWriter(b), "find", b.opsSQL().find, []any{queue, id},
		&state, &l.ID, &l.Body, &prio, &l.Task, &attempt, &at)
	if err != nil || !found {
		return driver.Listed{}, "", false, err
	}
	l.Priority, l.TaskAttempt = uint8(prio), int(attempt)
	st := findStates[state]
	switch st {
	case driver.ListScheduled:
		l.At, l.NotBefore = at, at
	case driver.ListCompleted:
		l.At = at
	}
	return l, st, true, nil
}

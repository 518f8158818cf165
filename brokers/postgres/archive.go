package postgresbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
)

var _ driver.Archiver = (*Broker)(nil)

// The archive (driver.Archiver): the table archive (internal/pgdb's
// schema_broker.go), one row per (queue, message ID), which Reject writes
// too. Archive moves a delivery's row there in one statement, under its
// lease token like Ack, and trims the queue's archive in the same
// statement: the entries archived more than keep.MaxAge ago (by the
// server's clock) and those past the newest keep.MaxCount, oldest first,
// at most ArchiveTrimBatch of each a call (a tighter bound than before
// is reached over the next few Archive calls, never by one long DELETE).
// The count is found by walking the queue's archive index newest first,
// so an Archive costs O(MaxCount) index entries (10 000 by errand's
// default): archiving is for what fails for good, never the hot path.

const (
	// ArchivePreview is the most bytes of an entry's body Archived lists:
	// a longer entry is listed with its first ArchivePreview bytes and its
	// whole size (driver.ArchiveEntry.Size), and ArchivedEntry reads it
	// whole. 1 MiB, like the Redis broker's.
	ArchivePreview = 1 << 20
	// ArchiveTrimBatch is the most entries one Archive drops, of each of
	// its two bounds.
	ArchiveTrimBatch = 100
)

// archiveSQL: $1 row id, $2 deliveries (the lease token), $3 queue, $4
// message ID, $5 body, $6 priority, $7 task, $8 task attempt, $9 reason,
// $10 error, $11 attempts, $12 archived at, $13 MaxCount (0: none), $14
// MaxAge in µs (0: none). Returns 1 when the delivery was still leased
// (and is archived now), else 0.
const archiveSQL = `
WITH gone AS (
	DELETE FROM {messages} WHERE id = $1 AND deliveries = $2 AND leased
	RETURNING 1
), kept AS (
	INSERT INTO {archive} AS a (queue, msg_id, body, priority, task, task_attempt, reason, error, attempts, size, archived_at)
	SELECT $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, $12 FROM gone
	ON CONFLICT (queue, msg_id) DO UPDATE SET body = excluded.body, priority = excluded.priority,
		task = excluded.task, task_attempt = excluded.task_attempt, reason = excluded.reason,
		error = excluded.error, attempts = excluded.attempts, size = 0, archived_at = excluded.archived_at
	RETURNING 1
), old AS (
	SELECT msg_id FROM {archive}
	WHERE queue = $3 AND msg_id <> $4 AND $14::int8 > 0
		AND archived_at < clock_timestamp() - $14::int8 * interval '1 microsecond'
	ORDER BY archived_at LIMIT {trim}
), extra AS (
	SELECT msg_id FROM {archive}
	WHERE queue = $3 AND msg_id <> $4 AND $13::int8 > 0
	ORDER BY archived_at DESC, msg_id DESC OFFSET greatest($13::int8 - 1, 0) LIMIT {trim}
), trimmed AS (
	DELETE FROM {archive}
	WHERE queue = $3 AND EXISTS (SELECT 1 FROM gone)
		AND msg_id IN (SELECT msg_id FROM old UNION SELECT msg_id FROM extra)
)
SELECT count(*) FROM gone`

// archivedSQL: $1 queue, $2 offset, $3 limit; newest first, each body
// cut to ArchivePreview bytes (size: the whole body's, when cut).
const archivedSQL = `
SELECT msg_id, substring(body FROM 1 FOR {preview}), priority, task, task_attempt, reason, error, attempts,
	CASE WHEN size > 0 THEN size WHEN octet_length(body) > {preview} THEN octet_length(body) ELSE 0 END,
	archived_at
FROM {archive} WHERE queue = $1
ORDER BY archived_at DESC, msg_id DESC OFFSET $2 LIMIT $3`

// archivedEntrySQL: $1 queue, $2 message ID; the whole body.
const archivedEntrySQL = `
SELECT msg_id, body, priority, task, task_attempt, reason, error, attempts, size, archived_at
FROM {archive} WHERE queue = $1 AND msg_id = $2`

// requeueSQL deletes the entry ($1 queue, $2 message ID) and, only if it
// was there, inserts the message as Publish does: $3 queue, $4 ID, $5
// body, $6 priority, $7 task, $8 task attempt, $9 delay in µs (0: due
// now), $10 the NOTIFY channel. Returns a row when requeued.
const requeueSQL = `
WITH gone AS (
	DELETE FROM {archive} WHERE queue = $1 AND msg_id = $2 RETURNING 1
), ins AS (
	INSERT INTO {messages} (queue, msg_id, body, priority, task, task_attempt, eta, ready, due)
	SELECT $3, $4, $5, $6, $7, $8, x.e, $9::int8 <= 0, x.e
	FROM gone, (SELECT CASE WHEN $9::int8 > 0 THEN clock_timestamp() + $9::int8 * interval '1 microsecond'
		ELSE now() END AS e) x
	RETURNING queue
)
SELECT pg_notify($10, queue)::text FROM ins`

// deleteArchivedSQL: $1 queue, $2 message IDs.
const deleteArchivedSQL = `DELETE FROM {archive} WHERE queue = $1 AND msg_id = ANY($2::text[])`

// Archive removes d from its queue like Ack (ErrLeaseLost likewise) and
// keeps e in the queue's archive, trimmed to keep, in one statement.
func (b *Broker) Archive(ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	h, err := handleOf(d)
	if err != nil {
		return err
	}
	if e.ID == "" {
		e.Message = d.Message // the contract: no message given keeps d's
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	var maxAge int64
	if keep.MaxAge > 0 {
		maxAge = keep.MaxAge.Microseconds()
	}
	var n int64
	args := []any{h.id, h.n, d.Queue, e.ID, body, int16(e.Priority), e.Task, int32(e.TaskAttempt),
		e.Reason, e.Error, int32(e.Attempts), e.At, int64(max(keep.MaxCount, 0)), maxAge}
	if _, err := b.opsRow(ctx, pgxWriter(b), "archive", b.opsSQL().archive, args, &n); err != nil {
		return err
	}
	if n == 0 {
		return leaseLost("archive", d)
	}
	return nil
}

// scanEntry reads an archive row (archivedSQL's or archivedEntrySQL's
// columns) into an entry of queue.
func scanEntry(queue string) pgx.RowToFunc[driver.ArchiveEntry] {
	return func(row pgx.CollectableRow) (driver.ArchiveEntry, error) {
		e := driver.ArchiveEntry{Message: driver.Message{Queue: queue}}
		var prio int16
		var attempt, attempts, size int32
		err := row.Scan(&e.ID, &e.Body, &prio, &e.Task, &attempt, &e.Reason, &e.Error, &attempts, &size, &e.At)
		e.Priority, e.TaskAttempt, e.Attempts, e.Size = uint8(prio), int(attempt), int(attempts), int(size)
		return e, err
	}
}

// Archived returns a page of queue's archive, newest first, each body
// cut to ArchivePreview bytes. An offset below 0 or a limit below 1 is an
// error.
func (b *Broker) Archived(ctx context.Context, queue string, offset, limit int) ([]driver.ArchiveEntry, error) {
	if offset < 0 || limit < 1 {
		return nil, fmt.Errorf("postgres broker: Archived: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	return opsRows(ctx, b, "list archive", b.opsSQL().archived, scanEntry(queue), queue, int64(offset), int64(limit))
}

// ArchivedEntry returns the entry of queue whose message ID is id, body
// whole, or driver.ErrNotArchived.
func (b *Broker) ArchivedEntry(ctx context.Context, queue, id string) (driver.ArchiveEntry, error) {
	es, err := opsRows(ctx, b, "read archive entry", b.opsSQL().archivedEntry, scanEntry(queue), queue, id)
	if err != nil {
		return driver.ArchiveEntry{}, err
	}
	if len(es) == 0 {
		return driver.ArchiveEntry{}, fmt.Errorf("postgres broker: %s in the archive of queue %q: %w", id, queue, driver.ErrNotArchived)
	}
	return es[0], nil
}

// Requeue deletes entry id of queue's archive and publishes m (to its
// Queue, else queue) in one statement: ErrNotArchived, publishing
// nothing, when the entry is not there (another operator requeued it
// first: concurrent Requeues of one entry wait for each other on its row,
// and one wins).
func (b *Broker) Requeue(ctx context.Context, queue, id string, m driver.Message) error {
	if m.Queue == "" {
		m.Queue = queue
	}
	if b.opts.MaxPayload > 0 && len(m.Body) > b.opts.MaxPayload {
		return fmt.Errorf("postgres broker: requeue %s: %d bytes, limit %d: %w", m.ID, len(m.Body), b.opts.MaxPayload, driver.ErrPayloadTooLarge)
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	var delay int64
	if !m.NotBefore.IsZero() {
		if dd := time.Until(m.NotBefore); dd > 0 {
			delay = (dd + time.Microsecond - 1).Microseconds()
		}
	}
	var notified string
	args := []any{queue, id, m.Queue, m.ID, body, int16(m.Priority), m.Task, int32(m.TaskAttempt), delay, b.channel}
	found, err := b.opsRow(ctx, pgxWriter(b), "requeue", b.opsSQL().requeue, args, &notified)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("postgres broker: requeue %s of queue %q: %w", id, queue, driver.ErrNotArchived)
	}
	return nil
}

// DeleteArchived removes the entries ids of queue's archive and returns
// how many there were.
func (b *Broker) DeleteArchived(ctx context.Context, queue string, ids ...string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := b.opsExec(ctx, "delete archive entries", b.opsSQL().deleteArchived, queue, ids)
	return int(n), err
}

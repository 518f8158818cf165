package postgresbroker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// The optional capabilities' statements, on their own tables
// (internal/pgdb's brokerOpsV1: unique_keys, rate_buckets, schedules,
// heartbeats, pauses, completed, queues) and the core's (messages,
// archive), and the retention of their expired rows. Each call is one
// statement; the statements are rendered once per Broker, with its
// schema's quoted table names.

// opsState is what the capabilities keep per Broker: the rendered
// statements and the sweep's gate. Its zero value is ready.
type opsState struct {
	once sync.Once
	sql  opsStatements
	// nextSweep is when (Unix ns) the next sweep may run; 0: now.
	nextSweep atomic.Int64
	sweeping  atomic.Bool
}

// opsStatements are the capabilities' statements for one schema.
type opsStatements struct {
	lock, unlock                   string
	take                           string
	putSchedule, deleteSchedule    string
	schedules, claimTick, lastTick string
	beat, beats, unbeat            string
	pause, resume, paused          string
	sweep                          string
	archive, archived              string
	archivedEntry, requeue         string
	deleteArchived                 string
	stats, purge, queues           string
	knowsQueue                     string
	listPending, listScheduled     string
	listInFlight, listCompleted    string
	find                           string
	acquire, renew, free           string
}

// opsSQL returns b's statements, rendered on first use.
func (b *Broker) opsSQL() *opsStatements {
	b.ops.once.Do(func() {
		r := strings.NewReplacer(
			"{unique_keys}", pgdb.Table(b.opts.Schema, "unique_keys"),
			"{rate_buckets}", pgdb.Table(b.opts.Schema, "rate_buckets"),
			"{schedules}", pgdb.Table(b.opts.Schema, "schedules"),
			"{heartbeats}", pgdb.Table(b.opts.Schema, "heartbeats"),
			"{pauses}", pgdb.Table(b.opts.Schema, "pauses"),
			"{batch}", strconv.Itoa(SweepBatch),
			"{messages}", pgdb.Table(b.opts.Schema, "messages"),
			"{archive}", pgdb.Table(b.opts.Schema, "archive"),
			"{completed}", pgdb.Table(b.opts.Schema, "completed"),
			"{queues}", pgdb.Table(b.opts.Schema, "queues"),
			"{concurrency_slots}", pgdb.Table(b.opts.Schema, "concurrency_slots"),
			"{acquire_slots}", pgdb.Table(b.opts.Schema, "acquire_slots"),
			"{preview}", strconv.Itoa(ArchivePreview),
			"{trim}", strconv.Itoa(ArchiveTrimBatch),
		)
		s := &b.ops.sql
		for p, q := range map[*string]string{
			&s.lock: lockSQL, &s.unlock: unlockSQL,
			&s.take:        takeSQL,
			&s.putSchedule: putScheduleSQL, &s.deleteSchedule: deleteScheduleSQL,
			&s.schedules: schedulesSQL, &s.claimTick: claimTickSQL, &s.lastTick: lastTickSQL,
			&s.beat: beatSQL, &s.beats: beatsSQL, &s.unbeat: unbeatSQL,
			&s.pause: pauseSQL, &s.resume: resumeSQL, &s.paused: pausedSQL,
			&s.sweep:   sweepSQL,
			&s.archive: archiveSQL, &s.archived: archivedSQL, &s.archivedEntry: archivedEntrySQL,
			&s.requeue: requeueSQL, &s.deleteArchived: deleteArchivedSQL,
			&s.stats: statsSQL, &s.purge: purgeSQL, &s.queues: queuesSQL, &s.knowsQueue: knowsQueueSQL,
			&s.listPending: listPendingSQL, &s.listScheduled: listScheduledSQL,
			&s.listInFlight: listInFlightSQL, &s.listCompleted: listCompletedSQL, &s.find: findSQL,
			&s.acquire: acquireSQL, &s.renew: renewSQL, &s.free: freeSQL,
		} {
			*p = r.Replace(q)
		}
	})
	return &b.ops.sql
}

// Retention of the capabilities' expired rows: unique keys whose ttl ran
// out (their worker died before Unlock), rate buckets full again,
// heartbeats of workers gone without Unbeat, and concurrency slots whose
// holder died. Reads skip them already; the
// sweep deletes them, at most SweepBatch rows of each table in one short
// statement (FOR UPDATE SKIP LOCKED: it never waits for a producer's
// lock), at most once every SweepEvery per Broker, run by the Broker's
// own calls that touch these tables outside a caller's transaction (a
// worker's Beat, every Heartbeat interval, above all). A sweep that found
// a full batch lets the next call sweep again at once, so a backlog
// drains batch by batch.
const (
	SweepBatch = 1000
	SweepEvery = 10 * time.Second
)

// sweepSQL deletes up to SweepBatch expired rows of each table; returns
// the most it deleted of any one.
const sweepSQL = `
WITH u AS (
	DELETE FROM {unique_keys} WHERE key IN (
		SELECT key FROM {unique_keys} WHERE expires_at < clock_timestamp()
		LIMIT {batch} FOR UPDATE SKIP LOCKED)
	RETURNING 1
), r AS (
	DELETE FROM {rate_buckets} WHERE key IN (
		SELECT key FROM {rate_buckets} WHERE expires_at < clock_timestamp()
		LIMIT {batch} FOR UPDATE SKIP LOCKED)
	RETURNING 1
), h AS (
	DELETE FROM {heartbeats} WHERE id IN (
		SELECT id FROM {heartbeats} WHERE expires_at < clock_timestamp()
		LIMIT {batch} FOR UPDATE SKIP LOCKED)
	RETURNING 1
), c AS (
	DELETE FROM {concurrency_slots} WHERE (key, holder) IN (
		SELECT key, holder FROM {concurrency_slots} WHERE expires_at < clock_timestamp()
		LIMIT {batch} FOR UPDATE SKIP LOCKED)
	RETURNING 1
)
SELECT greatest((SELECT count(*) FROM u), (SELECT count(*) FROM r), (SELECT count(*) FROM h), (SELECT count(*) FROM c))`

// opsExec runs one statement of op on the pool and returns the rows it
// touched.
func (b *Broker) opsExec(ctx context.Context, op, sql string, args ...any) (int64, error) {
	if err := b.checkOpen(); err != nil {
		return 0, err
	}
	bctx, cancel := b.bound(ctx)
	defer cancel()
	tag, err := b.pool.Exec(bctx, sql, args...)
	if err != nil {
		return 0, b.fail(ctx, bctx, op, err)
	}
	return tag.RowsAffected(), nil
}

// opsRow runs one statement of op through w (the pool, or a caller's
// transaction) and scans its row into dest; found is false when it
// returned none.
func (b *Broker) opsRow(ctx context.Context, w pgdb.Writer, op, sql string, args []any, dest ...any) (found bool, err error) {
	if err := b.checkOpen(); err != nil {
		return false, err
	}
	bctx, cancel := b.bound(ctx)
	defer cancel()
	err = w.QueryRow(bctx, sql, args...).Scan(dest...)
	if pgdb.IsNoRows(err) {
		return false, nil
	}
	if err != nil {
		return false, b.fail(ctx, bctx, op, err)
	}
	return true, nil
}

// pgxWriter is b's pool as a pgdb.Writer, for the statements never run
// inside a caller's transaction.
func pgxWriter(b *Broker) pgdb.Writer {
	return pgdb.WriterFor(driver.WithTx(context.Background(), nil), b.pool)
}

// opsRows runs one query of op on the pool and collects its rows.
func opsRows[T any](ctx context.Context, b *Broker, op, sql string, row pgx.RowToFunc[T], args ...any) ([]T, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	bctx, cancel := b.bound(ctx)
	defer cancel()
	rows, err := b.pool.Query(bctx, sql, args...)
	if err != nil {
		return nil, b.fail(ctx, bctx, op, err)
	}
	out, err := pgx.CollectRows(rows, row)
	if err != nil {
		return nil, b.fail(ctx, bctx, op, err)
	}
	return out, nil
}

// maybeSweep runs the sweep when it is due and no other call of b runs
// one. Its error is dropped: the rows it would delete are invisible to
// reads, and the next sweep tries again. A caller's transaction in ctx is
// not used.
func (b *Broker) maybeSweep(ctx context.Context) {
	now := time.Now().UnixNano()
	if now < b.ops.nextSweep.Load() || !b.ops.sweeping.CompareAndSwap(false, true) {
		return
	}
	defer b.ops.sweeping.Store(false)
	var most int64
	if _, err := b.opsRow(ctx, pgxWriter(b), "sweep", b.opsSQL().sweep, nil, &most); err != nil {
		b.ops.nextSweep.Store(now + int64(SweepEvery))
		return
	}
	if most >= SweepBatch {
		return // a backlog: the next call sweeps again
	}
	b.ops.nextSweep.Store(now + int64(SweepEvery))
}

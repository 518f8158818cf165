package postgresbroker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/internal/pgdb"
)

// The optional capabilities' own tables (internal/pgdb's brokerOpsV1:
// unique_keys, rate_buckets, schedules, heartbeats, pauses) and their
// retention. Each call is one statement; the statements are rendered
// once per Broker, with its schema's quoted table names.

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
}

// opsSQL returns b's statements, rendered on first use.
func (b *Broker) opsSQL() *opsStatements {
	b.ops.once.Do(func() {
		r := strings.NewReplacer(
			"{unique_keys}", pgdb.Table(b.schema, "unique_keys"),
			"{rate_buckets}", pgdb.Table(b.schema, "rate_buckets"),
			"{schedules}", pgdb.Table(b.schema, "schedules"),
			"{heartbeats}", pgdb.Table(b.schema, "heartbeats"),
			"{pauses}", pgdb.Table(b.schema, "pauses"),
			"{batch}", strconv.Itoa(SweepBatch),
		)
		s := &b.ops.sql
		for p, q := range map[*string]string{
			&s.lock: lockSQL, &s.unlock: unlockSQL,
			&s.take:        takeSQL,
			&s.putSchedule: putScheduleSQL, &s.deleteSchedule: deleteScheduleSQL,
			&s.schedules: schedulesSQL, &s.claimTick: claimTickSQL, &s.lastTick: lastTickSQL,
			&s.beat: beatSQL, &s.beats: beatsSQL, &s.unbeat: unbeatSQL,
			&s.pause: pauseSQL, &s.resume: resumeSQL, &s.paused: pausedSQL,
			&s.sweep: sweepSQL,
		} {
			*p = r.Replace(q)
		}
	})
	return &b.ops.sql
}

// Retention of the capabilities' expired rows: unique keys whose ttl ran
// out (their worker died before Unlock), rate buckets full again, and
// heartbeats of workers gone without Unbeat. Reads skip them already; the
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
)
SELECT greatest((SELECT count(*) FROM u), (SELECT count(*) FROM r), (SELECT count(*) FROM h))`

// maybeSweep runs the sweep when it is due and no other call of b runs
// one. Its error is dropped: the rows it would delete are invisible to
// reads, and the next sweep tries again. ctx is the calling operation's
// (bounded already); a caller's transaction in it is not used.
func (b *Broker) maybeSweep(ctx context.Context) {
	now := time.Now().UnixNano()
	if now < b.ops.nextSweep.Load() || !b.ops.sweeping.CompareAndSwap(false, true) {
		return
	}
	defer b.ops.sweeping.Store(false)
	var most int64
	if err := b.pool.QueryRow(ctx, b.opsSQL().sweep).Scan(&most); err != nil {
		b.ops.nextSweep.Store(now + int64(SweepEvery))
		return
	}
	if most >= SweepBatch {
		return // a backlog: the next call sweeps again
	}
	b.ops.nextSweep.Store(now + int64(SweepEvery))
}

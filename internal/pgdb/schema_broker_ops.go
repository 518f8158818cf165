package pgdb

import "strings"

// brokerOpsV1 is the tables of the broker's optional capabilities (unique
// keys, rate limits, schedules, heartbeats, pauses, the recently
// completed messages and what is known of each queue) at schema version 1
// (see migrations).
//
//	unique_keys  key -> holder until expires_at (driver.Uniquer); a row
//	             past expires_at is free, whoever holds it
//	rate_buckets a token bucket per key (driver.RateLimiter): tokens held
//	             at ts, next (when the next refused caller should come
//	             back), wait (the last call's answer), all in ms on the
//	             server's clock; expires_at is when it would be full again
//	             with no refused caller due (a missing bucket is full)
//	schedules    id -> definition and latest claimed tick (Unix ms), one
//	             row each (driver.ScheduleStore): deleting the row deletes
//	             both
//	heartbeats   worker id -> data until expires_at (driver.Heartbeater)
//	pauses       the queues paused now (driver.Pauser)
//	completed    the most recently acked messages of each queue
//	             (driver.Lister's ListCompleted), written by the ack
//	             statement itself; seq orders them (newest first by
//	             (queue, seq DESC)); trimmed to the newest few per queue
//	queues       per queue ever purged or trimmed: trimmed, how many acks
//	             left completed (so Stats.Completed = trimmed + the
//	             queue's rows of completed); a purged queue stays known
//
// Rows past their expires_at are skipped on read and deleted by the
// broker's sweep, a bounded batch at a time. rate_buckets and heartbeats
// hold a row per key or worker (few) and are rewritten on every call:
// no index on expires_at, and room on each page, so that each rewrite is
// a HOT update (no index entry, pruned in place).
func brokerOpsV1(schema string) string {
	return strings.NewReplacer(
		"{unique_keys}", Table(schema, "unique_keys"),
		"{rate_buckets}", Table(schema, "rate_buckets"),
		"{schedules}", Table(schema, "schedules"),
		"{heartbeats}", Table(schema, "heartbeats"),
		"{pauses}", Table(schema, "pauses"),
		"{completed}", Table(schema, "completed"),
		"{queues}", Table(schema, "queues"),
	).Replace(`
CREATE TABLE {unique_keys} (
	key        text PRIMARY KEY,
	holder     text NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX ON {unique_keys} (expires_at);

CREATE TABLE {rate_buckets} (
	key        text PRIMARY KEY,
	tokens     float8 NOT NULL,
	ts         float8 NOT NULL,
	next       float8 NOT NULL,
	wait       float8 NOT NULL,
	expires_at timestamptz NOT NULL
) WITH (fillfactor = 50);

CREATE TABLE {schedules} (
	id         text PRIMARY KEY,
	data       bytea NOT NULL,
	last_tick  bigint
);

CREATE TABLE {heartbeats} (
	id         text PRIMARY KEY,
	data       bytea NOT NULL,
	expires_at timestamptz NOT NULL
) WITH (fillfactor = 50);

CREATE TABLE {pauses} (
	queue      text PRIMARY KEY,
	paused_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE {completed} (
	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue        text NOT NULL,
	msg_id       text NOT NULL,
	body         bytea NOT NULL,
	priority     smallint NOT NULL DEFAULT 0,
	task         text NOT NULL DEFAULT '',
	task_attempt int NOT NULL DEFAULT 0,
	acked_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX completed_newest ON {completed} (queue, seq DESC);

CREATE TABLE {queues} (
	name       text PRIMARY KEY,
	trimmed    bigint NOT NULL DEFAULT 0
);
`)
}

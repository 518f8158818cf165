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
//	concurrency_slots
//	             a row per slot held of a concurrency limit
//	             (driver.ConcurrencyLimiter): key, holder and when the
//	             slot lapses (expires_at); a row past it is free.
//	             Renewed at every lease extension of a running task:
//	             no index on expires_at, room on each page (HOT updates)
//	acquire_slots(holder, keys, limits, ttl_ms)
//	             takes a slot of every key, all or none (one statement
//	             calls it): it serializes the acquirers of each key on a
//	             transaction-scoped advisory lock (two-int form:
//	             hashtext('errand.concurrency_slots'), hashtext(key))
//	             taken in key order, so each of its statements sees every
//	             slot committed before it, and reports whether it took
//	             them
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
		"{concurrency_slots}", Table(schema, "concurrency_slots"),
		"{acquire_slots}", Table(schema, "acquire_slots"),
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

CREATE TABLE {concurrency_slots} (
	key        text NOT NULL,
	holder     text NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, holder)
) WITH (fillfactor = 50);

CREATE FUNCTION {acquire_slots}(a_holder text, a_keys text[], a_limits int[], a_ttl_ms bigint) RETURNS bool
LANGUAGE plpgsql AS $$
DECLARE
  k text;
BEGIN
  FOR k IN SELECT DISTINCT u FROM unnest(a_keys) u ORDER BY u LOOP
    PERFORM pg_advisory_xact_lock(hashtext('errand.concurrency_slots'), hashtext(k));
  END LOOP;
  DELETE FROM {concurrency_slots} WHERE key = ANY(a_keys) AND expires_at <= clock_timestamp();
  IF EXISTS (SELECT 1 FROM unnest(a_keys, a_limits) AS s(key, lim)
      WHERE (SELECT count(*) FROM {concurrency_slots} c WHERE c.key = s.key AND c.holder <> a_holder) >= s.lim) THEN
    RETURN false;
  END IF;
  INSERT INTO {concurrency_slots} (key, holder, expires_at)
  SELECT DISTINCT u, a_holder, clock_timestamp() + a_ttl_ms * interval '1 millisecond' FROM unnest(a_keys) u
  ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at;
  RETURN true;
END
$$;
`)
}

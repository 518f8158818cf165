package pgdb

import "strings"

// brokerV1 is the broker's tables at schema version 1 (see migrations).
//
// messages holds every message published and not yet acked or set
// aside: one row per message, deleted by its Ack (so completed rows never
// accumulate; what is left is dead tuples, which autovacuum reclaims).
//
//	id            the row's own key, in publish order (bigint identity):
//	              a delivery's handle names it with deliveries
//	queue         Message.Queue
//	msg_id        Message.ID (not unique: a task may be sent again)
//	body          Message.Body
//	priority      Message.Priority (0..255); higher is delivered first
//	task          Message.Task ('' when unknown)
//	task_attempt  Message.TaskAttempt (0 when unknown)
//	eta           when the message is due: the publish time for one with
//	              no NotBefore, else NotBefore on the server's clock (a
//	              release with a not-before time sets it again); never
//	              changed by a lease. Orders due messages (by ETA) and
//	              is what a listing of scheduled messages shows
//	ready         true: due and not leased, deliverable with no time to
//	              check (index messages_ready, priority then publish
//	              order). false: the row waits for due (index
//	              messages_due): a delayed message, or one in flight
//	due           when ready is false, the time the row may be taken:
//	              eta for a delayed message, the lease deadline for one
//	              in flight (a lapsed lease makes it deliverable again,
//	              with no write). Equals eta when ready
//	leased        true while a consumer holds the row (fetched, not
//	              acked, released or rejected); in flight now is leased
//	              AND due > now(), a lapsed lease is leased AND due <= now()
//	deliveries    how many times it was fetched (driver.Delivery.Attempt);
//	              with id it is the lease token: a settle names
//	              (id, deliveries), so one whose lease lapsed and was
//	              fetched again finds no row (driver.ErrLeaseLost)
//	published_at  when the row was first published (server clock)
//
// So, per queue: pending = ready OR (NOT ready AND due <= now()) — a
// lapsed lease is pending again; delayed = NOT ready AND NOT leased AND
// due > now(); in flight = leased AND due > now().
//
// archive holds what was set aside for good (Reject, driver.Archiver),
// one row per (queue, msg_id): archiving an ID again replaces it.
//
//	queue, msg_id, body, priority, task, task_attempt   the message
//	reason        why, in a few words (ArchiveEntry.Reason)
//	error         the last error's text (ArchiveEntry.Error)
//	attempts      ArchiveEntry.Attempts (Reject: the deliveries)
//	size          the body's full size when body holds only a preview
//	              (ArchiveEntry.Size), else 0
//	archived_at   when (server clock); newest first by (queue,
//	              archived_at DESC)
func brokerV1(schema string) string {
	return strings.NewReplacer(
		"{messages}", Table(schema, "messages"),
		"{archive}", Table(schema, "archive"),
	).Replace(`
CREATE TABLE {messages} (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue        text NOT NULL,
	msg_id       text NOT NULL,
	body         bytea NOT NULL,
	priority     smallint NOT NULL DEFAULT 0,
	task         text NOT NULL DEFAULT '',
	task_attempt int NOT NULL DEFAULT 0,
	eta          timestamptz NOT NULL,
	ready        boolean NOT NULL,
	due          timestamptz NOT NULL,
	leased       boolean NOT NULL DEFAULT false,
	deliveries   int NOT NULL DEFAULT 0,
	published_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_ready ON {messages} (queue, priority DESC, id) WHERE ready;
CREATE INDEX messages_due ON {messages} (queue, due) WHERE NOT ready;

CREATE TABLE {archive} (
	queue        text NOT NULL,
	msg_id       text NOT NULL,
	body         bytea NOT NULL,
	priority     smallint NOT NULL DEFAULT 0,
	task         text NOT NULL DEFAULT '',
	task_attempt int NOT NULL DEFAULT 0,
	reason       text NOT NULL DEFAULT '',
	error        text NOT NULL DEFAULT '',
	attempts     int NOT NULL DEFAULT 0,
	size         int NOT NULL DEFAULT 0,
	archived_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (queue, msg_id)
);
CREATE INDEX archive_newest ON {archive} (queue, archived_at DESC);
`)
}

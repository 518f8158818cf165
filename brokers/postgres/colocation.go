package postgresbroker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

var _ driver.Colocator = (*Broker)(nil)

// Colocate returns the broker's one-trip calls for be (driver.Colocator)
// when be declares its task states in the broker's own database and
// schema: its Location is a *pgdb.Location (errand's PostgreSQL result
// backend) that is Same as the broker's pool and Options.Schema (the same
// pool, or pools of equal host, port, database and user). Otherwise it
// answers nil, and errand takes the portable path. It does no I/O.
//
// Each call is then one statement, which writes the messages and the
// states in the backend's layout (set_states's statement, carried in
// its own, and the function start_states: internal/pgdb), atomically: a send's PENDING states
// commit with its messages, a fetch's STARTED states with its leases, a
// settle's final states with its acks.
func (b *Broker) Colocate(be driver.Backend) driver.Colocation {
	l, ok := be.(driver.Located)
	if !ok {
		return nil
	}
	loc, ok := l.Location().(*pgdb.Location)
	if !ok || loc == nil || loc.Pool == nil || !loc.Same(&pgdb.Location{Pool: b.pool, Schema: b.opts.Schema}) {
		return nil
	}
	return &colocation{b: b, loc: loc, sql: newColocationStatements(b.opts.Schema)}
}

// colocation is the broker's driver.Colocation for the states at loc.
type colocation struct {
	b   *Broker
	loc *pgdb.Location
	sql colocationStatements
}

// colocationStatements are the co-located calls' SQL, one statement each.
type colocationStatements struct {
	send, fetchStart, settle string
}

func newColocationStatements(schema string) colocationStatements {
	r := sqlNames(schema)
	return colocationStatements{
		// Publish's statement ($1 to $9) writing, in the same statement,
		// the PENDING states of $10 to $18 (pgdb.StateArgs) where a task
		// has none, expiring after $19 µs ($20 if_absent: true). One row:
		// the states written, the notifications sent. st is referenced by
		// the final SELECT, so it runs; ins is a data-modifying CTE, which
		// always does.
		send: r.Replace("\nWITH " + pgdb.SetStatesCTE(schema, 10) + ", " + publishRows + `
SELECT (SELECT n FROM st), (SELECT count(pg_notify($8, q)) FROM unnest($9::text[]) q)`),

		// Fetch's statement ($1 queue, $2 limit, $3 lease in µs) that also
		// begins, in the same statement, the attempt of each leased row
		// with a task attempt whose task is one of $4 (s: its order k by
		// task ID, the order in which every statement writing states
		// locks them, so that two never wait on each other; its
		// FirstDelivery the row's first delivery), by the
		// start rule of start_states (pgdb.StartFetchedSQL), with the
		// backend's expiry of $5 µs. One row per leased row: the fetch's
		// columns, whether its start was tried, the start's answer (NULL
		// when not tried) and the statement's time, now(): the RECEIVED
		// and STARTED times written.
		fetchStart: r.Replace("\nWITH " + fetchCandidates + ", f AS (\n" + fetchLease + `
), s AS (
	SELECT f.id AS row_id, f.msg_id AS id, f.task AS name, f.task_attempt AS attempt, f.deliveries = 1 AS first,
		row_number() OVER (ORDER BY f.msg_id COLLATE "C", f.id) AS k
	FROM f WHERE f.task_attempt >= 1 AND f.task = ANY($4::text[])
), started AS MATERIALIZED (` + pgdb.StartFetchedSQL(schema, "s", "$5::int8 * interval '1 microsecond'") + `
)
SELECT f.id, f.msg_id, f.body, f.priority, f.task, f.task_attempt, f.deliveries, f.eta,
	s.k IS NOT NULL, st.written, st.prev_body, st.prev_created, st.prev_started, st.prev_finished, st.prev_progress, now()
FROM f LEFT JOIN s ON s.row_id = f.id LEFT JOIN started st ON st.ord = s.k`),

		// Ack's statement ($1 ids, $2 deliveries) writing, in the same
		// statement, the states of $3 to $11 (pgdb.StateArgs, overwriting
		// all but a CANCELLED) expiring after $12 µs ($13 if_absent:
		// false), whether or not their rows are still leased. One row:
		// the states written, the ids acked (any other lost its lease),
		// the tasks whose state was refused because they are CANCELLED.
		// The acked rows go to completed, as Ack's do (ackedToCompleted).
		settle: r.Replace("\nWITH " + pgdb.SetStatesCTE(schema, 3) + `, acked AS (
	DELETE FROM {messages} m
	USING unnest($1::int8[], $2::int4[]) AS a(id, n)
	WHERE m.id = a.id AND m.deliveries = a.n AND m.leased
	RETURNING m.id, m.queue, m.msg_id, m.body, m.priority, m.task, m.task_attempt
)` + ackedToCompleted + `
SELECT (SELECT n FROM st), ARRAY(SELECT id FROM acked), (SELECT refused FROM st)`),
	}
}

// Send publishes msgs and writes sts (PENDING, only where a task has no
// state) in one statement: Publish's, inside the caller's transaction
// when ctx carries one (errand.WithTx), so that the messages and their
// states exist only if it commits, and notifies the queues as Publish
// does. The messages and states commit together: a worker never fetches
// a message whose PENDING is still to come.
//
// A message Publish would refuse publishes nothing (published false). A
// state that cannot be encoded is left out, the rest sent, and reported
// with published true.
func (c *colocation) Send(ctx context.Context, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
	b := c.b
	if err := b.checkOpen(); err != nil {
		return false, err
	}
	a, err := b.publishArgs(msgs)
	if err != nil {
		return false, err
	}
	var states pgdb.StateArgs
	var encodeErr error
	for _, st := range sts {
		if err := states.Append(st); err != nil && encodeErr == nil {
			encodeErr = fmt.Errorf("postgres broker: %w", err)
		}
	}
	if len(msgs) == 0 && states.Len() == 0 {
		return true, encodeErr
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	touched := distinct(a.queues)
	args := func(notify []string) []any {
		return append(append(a.args(), b.channel, notify), append(states.Args(), c.loc.Expiry.Microseconds(), true)...)
	}
	var n int32
	var notified int64
	if pgdb.InTx(ctx) {
		if err := pgdb.WriterFor(ctx, b.pool).QueryRow(bounded, c.sql.send, args(touched)...).Scan(&n, &notified); err != nil {
			return false, b.fail(ctx, bounded, "publish with PENDING states in the caller's transaction", err)
		}
		return true, encodeErr
	}
	notifyNow, later := b.notify.split(touched)
	conn, err := b.acquire(ctx, bounded, "publish with PENDING states")
	if err != nil {
		return false, err
	}
	defer conn.Release()
	if err := conn.QueryRow(bounded, c.sql.send, args(notifyNow)...).Scan(&n, &notified); err != nil {
		return false, b.fail(ctx, bounded, "publish with PENDING states", err)
	}
	b.notify.owe(later)
	for _, q := range touched {
		b.listen.wake(q)
	}
	return true, encodeErr
}

// FetchStart fetches as Fetch does (blocking as it does), and in the
// fetch's statement begins the attempt of each leased message whose Task
// is one of tasks and whose TaskAttempt is set, by driver.Starter's table
// (the backend's start_states): STARTED, at the statement's time, which
// it returns as at. A message without a Task or a TaskAttempt, or of
// another task, is delivered unstarted (its start nil). The leases and
// the starts commit together: a delivery is never handed out with its
// start undecided, and a failed statement leases nothing.
func (c *colocation) FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	var (
		ds     []*driver.Delivery
		starts []*driver.StartResult
		at     time.Time
	)
	err := c.b.block(ctx, queue, func() (bool, error) {
		var err error
		ds, starts, at, err = c.fetchStartOnce(ctx, queue, max(limit, 1), lease, tasks)
		return len(ds) > 0, err
	})
	return ds, starts, at, err
}

// fetchStartOnce runs the fetchStart statement once.
func (c *colocation) fetchStartOnce(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	b := c.b
	if err := b.checkOpen(); err != nil {
		return nil, nil, time.Time{}, err
	}
	if tasks == nil {
		tasks = []string{} // text[] NOT NULL: = ANY(NULL) would be NULL anyway, but say none
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	conn, err := b.acquire(ctx, bounded, "fetch and start")
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	defer conn.Release()
	rows, err := conn.Query(bounded, c.sql.fetchStart, queue, limit, microseconds(lease), tasks, c.loc.Expiry.Microseconds())
	if err != nil {
		return nil, nil, time.Time{}, b.fail(ctx, bounded, "fetch and start", err)
	}
	defer rows.Close()
	type taken struct {
		d     *driver.Delivery
		start *driver.StartResult
		eta   time.Time
		id    int64
	}
	var (
		got []taken
		at  time.Time
	)
	for rows.Next() {
		var (
			t                          taken
			prio                       int16
			attempt, delivery          int32
			tried                      bool
			written                    *bool
			body                       *string
			created, started, finished *time.Time
			progress                   *string
		)
		t.d = &driver.Delivery{Message: driver.Message{Queue: queue}}
		if err := rows.Scan(&t.id, &t.d.ID, &t.d.Body, &prio, &t.d.Task, &attempt, &delivery, &t.eta,
			&tried, &written, &body, &created, &started, &finished, &progress, &at); err != nil {
			return nil, nil, time.Time{}, b.fail(ctx, bounded, "fetch and start", err)
		}
		t.d.Priority, t.d.TaskAttempt, t.d.Attempt = uint8(prio), int(attempt), int(delivery)
		t.d.Handle = handle{id: t.id, n: delivery}
		if tried {
			t.start = startResult(t.d.ID, written, body, created, started, finished, progress)
		}
		got = append(got, t)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, time.Time{}, b.fail(ctx, bounded, "fetch and start", err)
	}
	// RETURNING has no order: Fetch's is restored.
	slices.SortFunc(got, func(x, y taken) int {
		if x.d.Priority != y.d.Priority {
			return int(y.d.Priority) - int(x.d.Priority)
		}
		if c := x.eta.Compare(y.eta); c != 0 {
			return c
		}
		return int(x.id - y.id)
	})
	ds, starts := make([]*driver.Delivery, len(got)), make([]*driver.StartResult, len(got))
	for i, t := range got {
		ds[i], starts[i] = t.d, t.start
	}
	return ds, starts, at.UTC(), nil
}

// startResult is the answer of a start the fetch tried: written, and the
// previous state's columns (body NULL: none). A previous state that
// cannot be decoded is the start's Err (Written still says whether
// STARTED was written).
func startResult(id string, written *bool, body *string, created, started, finished *time.Time, progress *string) *driver.StartResult {
	res := &driver.StartResult{}
	if written == nil {
		res.Err = fmt.Errorf("postgres broker: the start of task %s answered nothing", id)
		return res
	}
	res.Written = *written
	if body != nil {
		prev, err := pgdb.DecodeState(id, *body, created, started, finished, progress)
		if err != nil {
			res.Err = fmt.Errorf("postgres broker: the previous state of task %s: %w", id, err)
		}
		res.Prev = prev
	}
	return res
}

// Settle writes sts[i] (overwriting, restarting its expiry) and acks
// ds[i] in one statement: every state is written, and each delivery
// still leased under its token acked; the others answer
// driver.ErrLeaseLost, their states written. A state over a task that is
// CANCELLED is not written (driver.Canceller: only a PENDING replaces
// it) and its delivery, acked, answers an error wrapping
// driver.ErrCancelled (and driver.ErrLeaseLost too when its lease was
// lost). The two commit together, so
// a consumer that sees a message gone finds its state. A delivery not of
// this broker, of another queue than the first, or whose state cannot be
// encoded fails alone: neither written nor acked.
func (c *colocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*driver.TaskState) []error {
	b := c.b
	if err := b.checkOpen(); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	if len(sts) != len(ds) {
		return driver.BatchErrors(len(ds), fmt.Errorf("postgres broker: %d states for %d deliveries", len(sts), len(ds)))
	}
	errs := make([]error, len(ds))
	var (
		idx    []int
		ids    []int64
		ns     []int32
		states pgdb.StateArgs
		queue  string
	)
	for i, d := range ds {
		h, err := handleOf(d)
		switch {
		case err != nil:
			errs[i] = err
			continue
		case len(idx) > 0 && d.Queue != queue:
			errs[i] = fmt.Errorf("postgres broker: delivery %q is of queue %q, not %q: one co-located settle is of one queue", d.ID, d.Queue, queue)
			continue
		}
		if err := states.Append(sts[i]); err != nil {
			errs[i] = fmt.Errorf("postgres broker: %w", err)
			continue
		}
		queue = d.Queue
		idx = append(idx, i)
		ids, ns = append(ids, h.id), append(ns, h.n)
	}
	if len(idx) == 0 {
		return errs
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	fail := func(err error) []error {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	conn, err := b.acquire(ctx, bounded, "ack with final states")
	if err != nil {
		return fail(err)
	}
	defer conn.Release()
	var (
		n       int32
		acked   []int64
		refused []string
	)
	args := append([]any{ids, ns}, append(states.Args(), c.loc.Expiry.Microseconds(), false)...)
	if err := conn.QueryRow(bounded, c.sql.settle, args...).Scan(&n, &acked, &refused); err != nil {
		return fail(b.fail(ctx, bounded, "ack with final states", err))
	}
	done := make(map[int64]bool, len(acked))
	for _, id := range acked {
		done[id] = true
	}
	cancelled := make(map[string]bool, len(refused))
	for _, id := range refused {
		cancelled[id] = true
	}
	for j, i := range idx {
		switch st := sts[i]; {
		case cancelled[st.TaskUUID] && st.State != driver.StatePending && done[ids[j]]:
			errs[i] = fmt.Errorf("postgres broker: ack of %q: %s of task %s not written over its CANCELLED state: %w", ds[i].ID, st.State, st.TaskUUID, driver.ErrCancelled)
		case cancelled[st.TaskUUID] && st.State != driver.StatePending:
			errs[i] = fmt.Errorf("postgres broker: %s of task %s not written over its CANCELLED state: %w", st.State, st.TaskUUID,
				errors.Join(driver.ErrCancelled, leaseLost("ack", ds[i])))
		case !done[ids[j]]:
			errs[i] = leaseLost("ack", ds[i])
		}
	}
	return errs
}

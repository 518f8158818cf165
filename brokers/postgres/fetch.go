package postgresbroker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
)

// Fetch leases up to limit due messages of queue for lease, in one
// statement: highest priority first, then earliest ETA, then publish
// order. When none is due it blocks until one may be: a publish to the
// queue wakes it at once (NOTIFY, received by the broker's one listening
// connection), the queue's next delayed message or lapsing lease at its
// due time, and at the latest Options.PollInterval passes (a lost
// notification). It returns ctx.Err() when ctx ends, and driver.ErrClosed
// once Close is called.
//
// A statement that fails on a broken connection (the server restarted,
// the pool's connection was killed) is tried again at once, twice: the
// pool replaces the connection. Taking a message twice is harmless to
// at-least-once delivery (a lease that was taken and lost lapses).
func (b *Broker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	var ds []*driver.Delivery
	err := b.block(ctx, queue, func() (bool, error) {
		var err error
		ds, err = b.takeOnce(ctx, queue, max(limit, 1), lease)
		return len(ds) > 0, err
	})
	return ds, err
}

// block is Fetch's loop around take, which runs one fetch statement and
// reports whether it took something: it runs take until it does (or
// fails), waiting between tries as Fetch describes. A take failing on a
// broken connection is tried again at once, twice.
func (b *Broker) block(ctx context.Context, queue string, take func() (bool, error)) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	b.listen.start(ctx)
	for {
		woken := b.listen.wait(queue)
		took, err := b.retried(ctx, take)
		if err != nil || took {
			return err
		}
		next := b.nextDue(ctx, queue)
		timer := time.NewTimer(next)
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-b.closed:
			timer.Stop()
			return errClosed
		}
		timer.Stop()
	}
}

// retried runs take, tried again on a broken connection.
func (b *Broker) retried(ctx context.Context, take func() (bool, error)) (bool, error) {
	var err error
	for range 3 {
		var took bool
		took, err = take()
		if err == nil || !errors.Is(err, ErrConnection) || ctx.Err() != nil || b.isClosed() {
			return took, err
		}
	}
	return false, err
}

func (b *Broker) takeOnce(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	c, err := b.acquire(ctx, bounded, "fetch")
	if err != nil {
		return nil, err
	}
	defer c.Release()
	rows, err := c.Query(bounded, b.sql.fetch, queue, limit, microseconds(lease))
	if err != nil {
		return nil, b.fail(ctx, bounded, "fetch", err)
	}
	defer rows.Close()
	type taken struct {
		d   *driver.Delivery
		eta time.Time
		id  int64
	}
	var got []taken
	for rows.Next() {
		var (
			t        taken
			prio     int16
			attempt  int32
			delivery int32
		)
		t.d = &driver.Delivery{Message: driver.Message{Queue: queue}}
		if err := rows.Scan(&t.id, &t.d.ID, &t.d.Body, &prio, &t.d.Task, &attempt, &delivery, &t.eta); err != nil {
			return nil, b.fail(ctx, bounded, "fetch", err)
		}
		t.d.Priority, t.d.TaskAttempt, t.d.Attempt = uint8(prio), int(attempt), int(delivery)
		t.d.Handle = handle{id: t.id, n: delivery}
		got = append(got, t)
	}
	if err := rows.Err(); err != nil {
		return nil, b.fail(ctx, bounded, "fetch", err)
	}
	// RETURNING has no order: the statement's is restored.
	slices.SortFunc(got, func(x, y taken) int {
		if x.d.Priority != y.d.Priority {
			return int(y.d.Priority) - int(x.d.Priority)
		}
		if c := x.eta.Compare(y.eta); c != 0 {
			return c
		}
		return int(x.id - y.id)
	})
	ds := make([]*driver.Delivery, len(got))
	for i, t := range got {
		ds[i] = t.d
	}
	return ds, nil
}

// nextDue is how long an empty Fetch waits before it looks again: until
// the queue's next delayed message or lease is due, at most
// PollInterval. An error reading it (the fetch after it will report a
// lasting one) waits a poll.
func (b *Broker) nextDue(ctx context.Context, queue string) time.Duration {
	wait := b.opts.PollInterval
	bounded, cancel := b.bound(ctx)
	defer cancel()
	var us *int64
	if err := b.pool.QueryRow(bounded, b.sql.nextDue, queue).Scan(&us); err != nil || us == nil {
		return wait
	}
	// One microsecond past the due time: a row due at t is taken by a
	// statement whose now() is at or after t.
	return min(wait, max(time.Duration(*us+1)*time.Microsecond, 0))
}

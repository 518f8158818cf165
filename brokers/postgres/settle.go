package postgresbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
)

// handle is a delivery's lease token (driver.Delivery.Handle): the row
// and its delivery count when fetched. A settle names both, so a
// delivery whose lease lapsed and whose message was fetched again (the
// count went up) finds no row: driver.ErrLeaseLost.
type handle struct {
	id int64
	n  int32
}

func handleOf(d *driver.Delivery) (handle, error) {
	if h, ok := d.Handle.(handle); ok {
		return h, nil
	}
	return handle{}, errBadHandle
}

// Ack deletes the deliveries' rows in one statement, each only while it
// is still leased under the delivery's token; the others answer
// driver.ErrLeaseLost. Acked rows are gone at once: no completed row
// stays in the table.
func (b *Broker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if err := b.checkOpen(); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	if len(ds) == 0 {
		return nil
	}
	ids, ns := make([]int64, len(ds)), make([]int32, len(ds))
	var errs []error
	for i, d := range ds {
		h, err := handleOf(d)
		if err != nil {
			if errs == nil {
				errs = make([]error, len(ds))
			}
			errs[i] = err
		}
		ids[i], ns[i] = h.id, h.n
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	c, err := b.acquire(ctx, bounded, "ack")
	if err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	defer c.Release()
	rows, err := c.Query(bounded, b.sql.ack, ids, ns)
	if err != nil {
		return driver.BatchErrors(len(ds), b.fail(ctx, bounded, "ack", err))
	}
	acked := make(map[int64]bool, len(ds))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return driver.BatchErrors(len(ds), b.fail(ctx, bounded, "ack", err))
		}
		acked[id] = true
	}
	if err := rows.Err(); err != nil {
		return driver.BatchErrors(len(ds), b.fail(ctx, bounded, "ack", err))
	}
	for i, d := range ds {
		if acked[ids[i]] || (errs != nil && errs[i] != nil) {
			continue
		}
		if errs == nil {
			errs = make([]error, len(ds))
		}
		errs[i] = leaseLost("ack", d)
	}
	return errs
}

// Release gives the delivery back: due at once in its place (its
// priority, ETA and publish order), or no earlier than notBefore on the
// server's clock. It notifies the queue's waiting consumers.
func (b *Broker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	var delay int64
	if !notBefore.IsZero() {
		if dd := time.Until(notBefore); dd > 0 {
			delay = (dd + time.Microsecond - 1).Microseconds()
		}
	}
	return b.settle(ctx, "release", d, b.sql.release, delay, b.channel)
}

// Extend renews the delivery's lease for lease from now (server clock).
func (b *Broker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	return b.settle(ctx, "extend", d, b.sql.extend, microseconds(lease))
}

// Reject moves the delivery's row to its queue's archive (table archive)
// with reason, in one statement: it is never delivered again.
func (b *Broker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	return b.settle(ctx, "reject", d, b.sql.reject, reason)
}

// settle runs the statement of one delivery, whose first two arguments
// are its handle; no row touched means the lease was lost.
func (b *Broker) settle(ctx context.Context, op string, d *driver.Delivery, sql string, args ...any) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	h, err := handleOf(d)
	if err != nil {
		return err
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	c, err := b.acquire(ctx, bounded, op)
	if err != nil {
		return err
	}
	defer c.Release()
	tag, err := c.Exec(bounded, sql, append([]any{h.id, h.n}, args...)...)
	if err != nil {
		return b.fail(ctx, bounded, op, err)
	}
	if tag.RowsAffected() == 0 {
		return leaseLost(op, d)
	}
	return nil
}

func leaseLost(op string, d *driver.Delivery) error {
	return fmt.Errorf("postgres broker: %s %s: %w (its lease ran out and it was delivered again, or it was settled already)", op, d.ID, driver.ErrLeaseLost)
}

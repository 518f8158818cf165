package memorybroker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/memcoloc"
)

var _ driver.Colocator = (*Broker)(nil)

// Colocate returns the broker's one-trip calls for be (driver.Colocator)
// when be is errand's memory result backend: its Location is the memory
// backend's store of states (an internal type of errand's, which no other
// driver declares). The broker and the backend are then one process, and
// each call does the broker's part and the backend's in one call of
// errand's: a send writes PENDING (where absent) and publishes, a fetch
// begins the attempts of what it leases, a settle writes the final states
// and acks. Any other backend gets nil. It does no I/O.
func (b *Broker) Colocate(be driver.Backend) driver.Colocation {
	l, ok := be.(driver.Located)
	if !ok {
		return nil
	}
	loc, ok := l.Location().(*memcoloc.Location)
	if !ok || loc == nil || loc.States == nil {
		return nil
	}
	return &colocation{b: b, st: loc.States}
}

// colocation is the broker's driver.Colocation for the states st.
type colocation struct {
	b  *Broker
	st memcoloc.States
}

// Send writes the states where absent and publishes, under the broker's
// lock: no fetch takes a message whose PENDING is still to come, and the
// publish is all or nothing. Inside a transaction (a *Tx in ctx) the
// backend keeps the states in the Tx and the broker the messages, and
// the Tx's Commit applies them in one step.
func (c *colocation) Send(ctx context.Context, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b := c.b
	if driver.TxFrom(ctx) != nil {
		for _, err := range c.st.SetPendingIfAbsent(ctx, sts) {
			if err != nil {
				return false, err
			}
		}
		if err := b.Publish(ctx, msgs...); err != nil {
			return false, err
		}
		return true, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, driver.ErrClosed
	}
	for _, err := range c.st.SetPendingIfAbsent(ctx, sts) {
		if err != nil {
			return false, err
		}
	}
	b.publish(msgs...)
	return true, nil
}

// FetchStart fetches as Fetch does, then begins the attempt of each
// delivery whose task is one of tasks with the backend's Start, before it
// returns: a delivery is never handed out with its start undecided, and
// the starts are made even if ctx ends meanwhile (the deliveries are
// leased already).
func (c *colocation) FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	ds, err := c.b.Fetch(ctx, queue, limit, lease)
	if err != nil || len(ds) == 0 {
		return ds, nil, time.Time{}, err
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	var reqs []driver.StartRequest
	var idx []int
	for i, d := range ds {
		if d.Task == "" {
			continue
		}
		if _, ok := slices.BinarySearch(tasks, d.Task); !ok {
			continue
		}
		rcv := &driver.TaskState{TaskUUID: d.ID, TaskName: d.Task, State: driver.StateReceived, Attempt: d.TaskAttempt, CreatedAt: at}
		st := rcv.Copy()
		st.State, st.StartedAt = driver.StateStarted, at
		reqs = append(reqs, driver.StartRequest{Received: rcv, Started: st, FirstDelivery: d.Attempt == 1})
		idx = append(idx, i)
	}
	starts := make([]*driver.StartResult, len(ds))
	if len(reqs) > 0 {
		res := c.st.Start(context.WithoutCancel(ctx), reqs)
		for j, i := range idx {
			r := driver.StartResult{Err: fmt.Errorf("memory broker: the backend answered %d starts for %d", len(res), len(reqs))}
			if len(res) == len(reqs) {
				r = res[j]
			}
			starts[i] = &r
		}
	}
	return ds, starts, at, nil
}

// Settle writes the states, then acks the deliveries whose state was
// written or refused over a cancel: a state is never written after its
// delivery's ack, a lost lease leaves its state written, and a cancelled
// task's delivery is acked, its state not written, answering the
// backend's error wrapping driver.ErrCancelled (driver.Colocation).
func (c *colocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*driver.TaskState) []error {
	if err := ctx.Err(); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	if len(sts) != len(ds) {
		return driver.BatchErrors(len(ds), fmt.Errorf("memory broker: %d states for %d deliveries", len(sts), len(ds)))
	}
	out := make([]error, len(ds))
	serrs := c.st.SetStates(ctx, sts)
	var ack []*driver.Delivery
	var idx []int
	for i, d := range ds {
		if serrs != nil && serrs[i] != nil {
			out[i] = serrs[i]
			if !errors.Is(serrs[i], driver.ErrCancelled) {
				continue
			}
		}
		ack, idx = append(ack, d), append(idx, i)
	}
	if aerrs := c.b.Ack(ctx, ack); aerrs != nil {
		for j, i := range idx {
			if aerrs[j] != nil {
				out[i] = aerrs[j]
			}
		}
	}
	return out
}

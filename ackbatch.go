package errand

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/errand-go/errand/driver"
)

// ackFlights is how many AckBatch calls may be in flight per queue. An ack
// that finds fewer in flight is sent at once (a lone ack never waits for a
// window); one that finds them all busy joins the next batch, which the
// first call to return sends. Under load, batches form by themselves.
const ackFlights = 4

// ackBatcher coalesces the acks of one broker's concurrent tasks into
// driver.BatchAcker calls, per queue, up to limit deliveries a call.
type ackBatcher struct {
	base  context.Context // cancelled when the broker closes
	drv   driver.BatchAcker
	limit int // most deliveries a call (0: no limit)

	mu     sync.Mutex
	queues map[string]*ackQueue
}

type ackQueue struct {
	flying  int
	pending []*ackReq
}

type ackReq struct {
	ctx  context.Context
	d    *driver.Delivery
	done chan error // buffered: the flusher never blocks on a waiter that left
}

func newAckBatcher(base context.Context, drv driver.BatchAcker, limit int) *ackBatcher {
	return &ackBatcher{base: base, drv: drv, limit: limit, queues: map[string]*ackQueue{}}
}

// ack acks d in the next batch of its queue and waits for its own result,
// or for ctx.
func (a *ackBatcher) ack(ctx context.Context, d *driver.Delivery) error {
	req := &ackReq{ctx: ctx, d: d, done: make(chan error, 1)}
	a.mu.Lock()
	q := a.queues[d.Queue]
	if q == nil {
		q = &ackQueue{}
		a.queues[d.Queue] = q
	}
	q.pending = append(q.pending, req)
	if q.flying < ackFlights {
		// Send now, on this goroutine; what queues up meanwhile goes on
		// another, so this ack returns as soon as its own batch is done.
		q.flying++
		batch := a.take(q)
		a.mu.Unlock()
		a.send(batch)
		if next := a.next(d.Queue, q); next != nil {
			go a.fly(d.Queue, q, next)
		}
	} else {
		a.mu.Unlock()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take removes the next batch from q; a.mu must be held.
func (a *ackBatcher) take(q *ackQueue) []*ackReq {
	n := len(q.pending)
	if a.limit > 0 {
		n = min(n, a.limit)
	}
	batch := q.pending[:n:n]
	q.pending = q.pending[n:]
	return batch
}

// fly sends batch, then keeps sending what queued up meanwhile, until the
// queue has nothing pending.
func (a *ackBatcher) fly(queue string, q *ackQueue, batch []*ackReq) {
	for batch != nil {
		a.send(batch)
		batch = a.next(queue, q)
	}
}

// next takes q's next batch after a send, or, when nothing is pending,
// ends that flight and returns nil.
func (a *ackBatcher) next(queue string, q *ackQueue) []*ackReq {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(q.pending) == 0 {
		q.flying--
		if q.flying == 0 {
			delete(a.queues, queue)
		}
		return nil
	}
	return a.take(q)
}

// send makes one AckBatch call under a ctx that ends when the broker
// closes or when every waiter of the batch has given up, so a hung server
// holds nobody past their own deadline.
func (a *ackBatcher) send(batch []*ackReq) {
	ctx, cancel := context.WithCancel(a.base)
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	ds := make([]*driver.Delivery, len(batch))
	for i, r := range batch {
		ds[i] = r.d
		stop := context.AfterFunc(r.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	errs := a.drv.AckBatch(ctx, ds)
	for i, r := range batch {
		var err error
		if i < len(errs) {
			err = errs[i]
		} else {
			err = errShortAckBatch
		}
		r.done <- err
	}
}

var errShortAckBatch = errors.New("errand: the broker's AckBatch returned fewer results than deliveries")

package memorybroker

import (
	"container/heap"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/named"
)

// Options configures a Broker.
type Options struct {
	// MaxPayload is the largest message body accepted, in bytes.
	// Default: 0, no limit.
	MaxPayload int
}

// Broker is an in-process driver.Broker. The zero value is not usable; call
// New.
type Broker struct {
	opts Options
	name string // registry name, "" when private

	mu     sync.Mutex
	queues map[string]*queue
	wake   chan struct{} // closed and replaced whenever a message becomes available
	seq    uint64
	closed bool

	paused map[string]bool // queues paused (Pauser)
	beats  map[string]beat // worker heartbeats (Heartbeater)

	locks   map[string]uniqueLock // uniqueness locks (Uniquer), made on first use
	buckets map[string]*bucket    // token buckets (RateLimiter), made on first use

	schedules map[string]*schedule // periodic schedules (ScheduleStore), made on first use

	// Cancel notices (CancelNotifier), made on the first ListenCancel:
	// the listeners, closed on Close, which waits for their goroutines.
	listeners map[*cancelListener]struct{}
	closing   chan struct{}
	listening sync.WaitGroup
}

var (
	_ driver.Broker        = (*Broker)(nil)
	_ driver.Limiter       = (*Broker)(nil)
	_ driver.Purger        = (*Broker)(nil)
	_ driver.StatsReporter = (*Broker)(nil)
	_ driver.Archiver      = (*Broker)(nil)
	_ driver.Lister        = (*Broker)(nil)
	_ driver.Finder        = (*Broker)(nil)
	_ driver.QueueLister   = (*Broker)(nil)
	_ driver.Pauser        = (*Broker)(nil)
	_ driver.Heartbeater   = (*Broker)(nil)
)

// New returns an empty broker. opts may be nil.
func New(opts *Options) *Broker {
	b := &Broker{queues: make(map[string]*queue), wake: make(chan struct{}), paused: make(map[string]bool), beats: make(map[string]beat)}
	if opts != nil {
		b.opts = *opts
	}
	return b
}

type entry struct {
	msg        driver.Message
	seq        uint64
	due        time.Time
	deliveries int
	token      uint64 // changes on every delivery; a stale handle no longer matches
	leaseUntil time.Time
}

type queue struct {
	ready    entryHeap // due: by priority, due time, publish order
	delayed  entryHeap // not due: by due time, publish order
	inflight map[uint64]*entry
	// leaseCheck is no later than the earliest lease end in inflight (zero:
	// scan): promote scans inflight only once it has come, not on every
	// Fetch.
	leaseCheck time.Time
	// published: a message was published to the queue (QueueLister).
	published bool
	// archive holds the entries set aside for good (Archive and Reject),
	// oldest first.
	archive []driver.ArchiveEntry
	// completed holds the last MaxCompleted acked messages, oldest first;
	// acks counts every ack.
	completed []driver.Listed
	acks      int64
}

type handle struct{ seq, token uint64 }

func (b *Broker) queue(name string) *queue {
	q := b.queues[name]
	if q == nil {
		q = &queue{inflight: make(map[uint64]*entry), ready: entryHeap{less: byReadiness}, delayed: entryHeap{less: byDue}}
		b.queues[name] = q
	}
	return q
}

// broadcast wakes every blocked Fetch; b.mu must be held.
func (b *Broker) broadcast() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// Limits reports the maximum payload; there is no maximum delay.
func (b *Broker) Limits() driver.Limits { return driver.Limits{MaxPayload: b.opts.MaxPayload} }

// Publish enqueues msgs. It never blocks. (errand refuses a batch with a
// body over MaxPayload before it gets here.) Inside a transaction (a *Tx
// in ctx, driver.Transactor) it keeps them in the Tx until its Commit.
func (b *Broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if ok, err := b.inTx(ctx, func(w *txWrites) error { return w.publish(msgs) }); ok {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	b.publish(msgs...)
	return nil
}

// publish enqueues msgs and wakes fetchers; b.mu must be held.
func (b *Broker) publish(msgs ...driver.Message) {
	now := time.Now()
	for _, m := range msgs {
		m.Body = slices.Clone(m.Body)
		b.seq++
		e := &entry{msg: m, seq: b.seq, due: m.NotBefore}
		q := b.queue(m.Queue)
		q.published = true
		if e.due.After(now) {
			heap.Push(&q.delayed, e)
		} else {
			heap.Push(&q.ready, e)
		}
	}
	b.broadcast()
}

// promote moves due delayed messages and expired leases to ready, and
// returns the earliest time something else will become ready (zero: none).
func (q *queue) promote(now time.Time) time.Time {
	for len(q.delayed.es) > 0 && !q.delayed.es[0].due.After(now) {
		heap.Push(&q.ready, heap.Pop(&q.delayed))
	}
	next := q.leaseCheck
	if !q.leaseCheck.After(now) {
		next = time.Time{}
		for seq, e := range q.inflight {
			if !e.leaseUntil.After(now) {
				delete(q.inflight, seq)
				e.token = 0
				heap.Push(&q.ready, e)
			} else if next.IsZero() || e.leaseUntil.Before(next) {
				next = e.leaseUntil
			}
		}
		q.leaseCheck = next
	}
	if len(q.delayed.es) > 0 && (next.IsZero() || q.delayed.es[0].due.Before(next)) {
		next = q.delayed.es[0].due
	}
	return next
}

// Fetch blocks until a message of queue is due, then leases up to limit.
func (b *Broker) Fetch(ctx context.Context, queueName string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	limit = max(limit, 1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, driver.ErrClosed
		}
		now := time.Now()
		q := b.queue(queueName)
		next := q.promote(now)
		if q.ready.Len() > 0 {
			out := make([]*driver.Delivery, 0, min(limit, q.ready.Len()))
			for len(out) < limit && q.ready.Len() > 0 {
				e := heap.Pop(&q.ready).(*entry)
				b.seq++
				e.token, e.leaseUntil = b.seq, now.Add(lease)
				if q.leaseCheck.IsZero() || e.leaseUntil.Before(q.leaseCheck) {
					q.leaseCheck = e.leaseUntil
				}
				e.deliveries++
				q.inflight[e.seq] = e
				m := e.msg
				m.Body = slices.Clone(m.Body)
				out = append(out, &driver.Delivery{Message: m, Attempt: e.deliveries, Handle: handle{e.seq, e.token}})
			}
			b.mu.Unlock()
			return out, nil
		}
		wake := b.wake
		b.mu.Unlock()

		var tc <-chan time.Time
		if !next.IsZero() {
			d := time.Until(next)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		case <-tc:
		}
	}
}

// leased returns the in-flight entry d refers to, if d still holds its
// lease (or the lease ran out but nobody took the message since).
func (b *Broker) leased(d *driver.Delivery) (*queue, *entry, error) {
	if b.closed {
		return nil, nil, driver.ErrClosed
	}
	h, ok := d.Handle.(handle)
	if !ok {
		return nil, nil, fmt.Errorf("memory broker: delivery %q was not fetched from this broker", d.ID)
	}
	q := b.queues[d.Queue]
	if q == nil {
		return nil, nil, driver.ErrLeaseLost
	}
	e := q.inflight[h.seq]
	if e == nil || e.token != h.token {
		return nil, nil, fmt.Errorf("memory broker: message %q: %w", d.ID, driver.ErrLeaseLost)
	}
	return q, e, nil
}

// Ack removes the delivered messages under one lock, and keeps each among
// its queue's recently completed ones. A delivery whose lease ran out
// fails alone, with driver.ErrLeaseLost.
func (b *Broker) Ack(_ context.Context, ds []*driver.Delivery) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	return driver.EachItem(len(ds), func(i int) error {
		q, e, err := b.leased(ds[i])
		if err != nil {
			return err
		}
		q.complete(e, now)
		return nil
	})
}

// complete removes the in-flight e as acked at now; b.mu must be held.
func (q *queue) complete(e *entry, now time.Time) {
	delete(q.inflight, e.seq)
	q.acks++
	q.completed = append(q.completed, driver.Listed{Message: e.msg, At: now})
	if over := len(q.completed) - MaxCompleted; over > 0 {
		clear(q.completed[:over])
		q.completed = q.completed[over:]
	}
}

// Release requeues the delivered message, due at notBefore.
func (b *Broker) Release(_ context.Context, d *driver.Delivery, notBefore time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, e, err := b.leased(d)
	if err != nil {
		return err
	}
	delete(q.inflight, e.seq)
	e.token, e.due = 0, notBefore
	if notBefore.After(time.Now()) {
		heap.Push(&q.delayed, e)
	} else {
		heap.Push(&q.ready, e)
	}
	b.broadcast()
	return nil
}

// Extend renews the delivery's lease for lease from now.
func (b *Broker) Extend(_ context.Context, d *driver.Delivery, lease time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, e, err := b.leased(d)
	if err != nil {
		return err
	}
	e.leaseUntil = time.Now().Add(lease)
	if e.leaseUntil.Before(q.leaseCheck) {
		q.leaseCheck = e.leaseUntil
	}
	return nil
}

// Reject moves the delivered message to the queue's archive (see
// Archive), with reason as its Reason and Error, its deliveries as its
// Attempts, under DefaultRetention.
func (b *Broker) Reject(_ context.Context, d *driver.Delivery, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, e, err := b.leased(d)
	if err != nil {
		return err
	}
	delete(q.inflight, e.seq)
	q.keep(driver.ArchiveEntry{Message: e.msg, Reason: reason, Error: reason, Attempts: e.deliveries}, DefaultRetention, time.Now())
	return nil
}

// Close drops every message and wakes blocked fetchers with driver.ErrClosed.
// A named broker is removed from the URL registry.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.queues = nil
	b.broadcast()
	closing := b.closing
	b.mu.Unlock()
	b.stopListeners(closing, &b.listening)
	if b.name != "" {
		instances.Forget(b.name, b)
	}
	return nil
}

func (b *Broker) inspect(queueName string, f func(q *queue) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	q := b.queue(queueName)
	q.promote(time.Now())
	return f(q)
}

// Purge drops the pending and delayed messages of queue.
func (b *Broker) Purge(_ context.Context, queueName string) (n int, err error) {
	err = b.inspect(queueName, func(q *queue) error {
		n = q.ready.Len() + q.delayed.Len()
		q.ready.es, q.delayed.es = nil, nil
		return nil
	})
	return n, err
}

// Stats counts queue.
func (b *Broker) Stats(_ context.Context, queueName string) (s driver.QueueStats, err error) {
	err = b.inspect(queueName, func(q *queue) error {
		s = driver.QueueStats{Pending: q.ready.Len(), Delayed: q.delayed.Len(), InFlight: len(q.inflight), Dead: len(q.archive), Completed: q.acks}
		return nil
	})
	return s, err
}

// entryHeap is a heap of entries under an ordering.
type entryHeap struct {
	es   []*entry
	less func(a, b *entry) bool
}

func (h *entryHeap) Len() int           { return len(h.es) }
func (h *entryHeap) Less(i, j int) bool { return h.less(h.es[i], h.es[j]) }
func (h *entryHeap) Swap(i, j int)      { h.es[i], h.es[j] = h.es[j], h.es[i] }
func (h *entryHeap) Push(x any)         { h.es = append(h.es, x.(*entry)) }
func (h *entryHeap) Pop() any {
	e := h.es[len(h.es)-1]
	h.es[len(h.es)-1] = nil
	h.es = h.es[:len(h.es)-1]
	return e
}

// byReadiness orders due messages: higher priority, then earlier due, then
// publish order.
func byReadiness(a, b *entry) bool {
	if a.msg.Priority != b.msg.Priority {
		return a.msg.Priority > b.msg.Priority
	}
	return byDue(a, b)
}

// byDue orders delayed messages by due time, then publish order.
func byDue(a, b *entry) bool {
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	return a.seq < b.seq
}

// instances holds the named brokers of memory://NAME URLs.
var instances named.Registry[*Broker]

// Open returns the broker for a memory:// URL (see the package doc).
func Open(_ context.Context, u *url.URL) (driver.Broker, error) {
	var opts Options
	if v := u.Query().Get("max_payload"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("memory broker: max_payload %q is not a byte count", v)
		}
		opts.MaxPayload = n
	}
	return instances.Get(u.Host+u.Path, func(name string) *Broker {
		b := New(&opts)
		b.name = name
		return b
	}), nil
}

func init() { driver.RegisterBroker("memory", Open) }

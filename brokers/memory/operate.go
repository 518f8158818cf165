package memorybroker

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/errand-go/errand/driver"
)

// The operator's capabilities: the archive, lists by state, the queues, pause
// flags and worker heartbeats. Each works under the broker's one mutex, so
// every method is atomic.

// MaxCompleted is how many recently acked messages each queue keeps for
// List(ListCompleted); older ones are forgotten (Stats' Completed still
// counts them).
const MaxCompleted = 1000

// DefaultRetention bounds a queue's archive for messages set aside by
// Reject. Archive takes its retention from the caller (errand's
// WorkerConfig.ArchiveRetention).
var DefaultRetention = driver.Retention{MaxCount: 10_000, MaxAge: 90 * 24 * time.Hour}

// beat is one worker's heartbeat.
type beat struct {
	data  []byte
	until time.Time
}

// keep puts e in q's archive at now (e.At, when zero), replacing an entry
// of the same ID, then applies keep; b.mu must be held.
func (q *queue) keep(e driver.ArchiveEntry, keep driver.Retention, now time.Time) {
	e.Body = slices.Clone(e.Body)
	if e.At.IsZero() {
		e.At = now
	}
	q.archive = slices.DeleteFunc(q.archive, func(a driver.ArchiveEntry) bool { return a.ID == e.ID })
	// Oldest first by At; entries archived at the same time in archive order.
	i := sort.Search(len(q.archive), func(i int) bool { return q.archive[i].At.After(e.At) })
	q.archive = slices.Insert(q.archive, i, e)
	if keep.MaxAge > 0 {
		cutoff := now.Add(-keep.MaxAge)
		n := sort.Search(len(q.archive), func(i int) bool { return !q.archive[i].At.Before(cutoff) })
		q.archive = slices.Delete(q.archive, 0, n)
	}
	if over := len(q.archive) - keep.MaxCount; keep.MaxCount > 0 && over > 0 {
		q.archive = slices.Delete(q.archive, 0, over)
	}
}

// Archive removes the delivery from its queue and keeps e in the queue's
// archive (e.Message, or the delivered message when e.ID is empty), then
// drops the entries beyond keep. ErrLeaseLost as Ack.
func (b *Broker) Archive(_ context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, le, err := b.leased(d)
	if err != nil {
		return err
	}
	delete(q.inflight, le.seq)
	if e.ID == "" {
		e.Message = le.msg
	}
	q.keep(e, keep, time.Now())
	return nil
}

// Archived returns up to limit entries of queue's archive, newest first,
// skipping the first offset.
func (b *Broker) Archived(_ context.Context, queueName string, offset, limit int) (out []driver.ArchiveEntry, err error) {
	if err := checkPage(offset, limit); err != nil {
		return nil, err
	}
	err = b.inspect(queueName, func(q *queue) error {
		for i := len(q.archive) - 1 - offset; i >= 0 && len(out) < limit; i-- {
			e := q.archive[i]
			e.Body = slices.Clone(e.Body)
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// ArchivedEntry returns the archived entry id of queue, or
// driver.ErrNotArchived.
func (b *Broker) ArchivedEntry(_ context.Context, queueName, id string) (out driver.ArchiveEntry, err error) {
	err = b.inspect(queueName, func(q *queue) error {
		i := slices.IndexFunc(q.archive, func(a driver.ArchiveEntry) bool { return a.ID == id })
		if i < 0 {
			return notArchived(queueName, id)
		}
		out = q.archive[i]
		out.Body = slices.Clone(out.Body)
		return nil
	})
	return out, err
}

func notArchived(queue, id string) error {
	return fmt.Errorf("memory broker: %q in the archive of queue %q: %w", id, queue, driver.ErrNotArchived)
}

// Requeue removes the entry id from queue's archive and publishes m (to
// queue when m.Queue is empty), under one lock.
func (b *Broker) Requeue(_ context.Context, queueName, id string, m driver.Message) error {
	return b.inspect(queueName, func(q *queue) error {
		i := slices.IndexFunc(q.archive, func(a driver.ArchiveEntry) bool { return a.ID == id })
		if i < 0 {
			return notArchived(queueName, id)
		}
		q.archive = slices.Delete(q.archive, i, i+1)
		if m.Queue == "" {
			m.Queue = queueName
		}
		b.publish(m)
		return nil
	})
}

// DeleteArchived removes the entries ids from queue's archive and returns
// how many there were.
func (b *Broker) DeleteArchived(_ context.Context, queueName string, ids ...string) (n int, err error) {
	err = b.inspect(queueName, func(q *queue) error {
		before := len(q.archive)
		q.archive = slices.DeleteFunc(q.archive, func(a driver.ArchiveEntry) bool { return slices.Contains(ids, a.ID) })
		n = before - len(q.archive)
		return nil
	})
	return n, err
}

// List returns up to limit messages of queue in state, skipping the first
// offset: pending by delivery order (priority, due time, publish order),
// scheduled by due time, in flight by when they were delivered, completed
// newest first (the last MaxCompleted acks).
func (b *Broker) List(_ context.Context, queueName string, state driver.ListState, offset, limit int) (out []driver.Listed, err error) {
	if err := checkPage(offset, limit); err != nil {
		return nil, err
	}
	var es []*entry
	err = b.inspect(queueName, func(q *queue) error {
		switch state {
		case driver.ListPending:
			es = slices.Clone(q.ready.es)
			slices.SortFunc(es, func(a, b *entry) int { return cmpBy(byReadiness, a, b) })
		case driver.ListScheduled:
			es = slices.Clone(q.delayed.es)
			slices.SortFunc(es, func(a, b *entry) int { return cmpBy(byDue, a, b) })
		case driver.ListInFlight:
			es = slices.Collect(maps.Values(q.inflight))
			slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.token, b.token) })
		case driver.ListCompleted:
			for i := len(q.completed) - 1 - offset; i >= 0 && len(out) < limit; i-- {
				l := q.completed[i]
				l.Body = slices.Clone(l.Body)
				out = append(out, l)
			}
			return nil
		default:
			return fmt.Errorf("memory broker: List: unknown state %q", state)
		}
		for _, e := range es[min(offset, len(es)):] {
			if len(out) == limit {
				break
			}
			l := driver.Listed{Message: e.msg}
			l.Body = slices.Clone(l.Body)
			if state == driver.ListScheduled {
				l.At = e.due
			}
			out = append(out, l)
		}
		return nil
	})
	return out, err
}

// Find returns the message id of queue with its list: in flight, pending,
// scheduled or completed (the last MaxCompleted acks), looked for in that
// order.
func (b *Broker) Find(_ context.Context, queueName, id string) (l driver.Listed, state driver.ListState, found bool, err error) {
	err = b.inspect(queueName, func(q *queue) error {
		for _, e := range q.inflight {
			if e.msg.ID == id {
				l, state, found = driver.Listed{Message: e.msg}, driver.ListInFlight, true
				return nil
			}
		}
		for _, e := range q.ready.es {
			if e.msg.ID == id {
				l, state, found = driver.Listed{Message: e.msg}, driver.ListPending, true
				return nil
			}
		}
		for _, e := range q.delayed.es {
			if e.msg.ID == id {
				l, state, found = driver.Listed{Message: e.msg, At: e.due}, driver.ListScheduled, true
				return nil
			}
		}
		for i := len(q.completed) - 1; i >= 0; i-- {
			if q.completed[i].ID == id {
				l, state, found = q.completed[i], driver.ListCompleted, true
				return nil
			}
		}
		return nil
	})
	l.Body = slices.Clone(l.Body)
	return l, state, found, err
}

func cmpBy(less func(a, b *entry) bool, a, b *entry) int {
	switch {
	case less(a, b):
		return -1
	case less(b, a):
		return 1
	}
	return 0
}

func checkPage(offset, limit int) error {
	if offset < 0 || limit < 1 {
		return fmt.Errorf("memory broker: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	return nil
}

// Queues returns every queue a message was published to, sorted.
func (b *Broker) Queues(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, driver.ErrClosed
	}
	var out []string
	for name, q := range b.queues {
		if q.published {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// locked runs f under b.mu unless the broker is closed.
func (b *Broker) locked(f func()) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	f()
	return nil
}

// Pause flags queue as paused for every Server using this broker value.
func (b *Broker) Pause(_ context.Context, queueName string) error {
	return b.locked(func() { b.paused[queueName] = true })
}

// Resume clears queue's paused flag.
func (b *Broker) Resume(_ context.Context, queueName string) error {
	return b.locked(func() { delete(b.paused, queueName) })
}

// Paused returns the paused queues, sorted.
func (b *Broker) Paused(context.Context) (out []string, err error) {
	err = b.locked(func() { out = slices.Sorted(maps.Keys(b.paused)) })
	return out, err
}

// Beat stores data for worker id, alive for ttl.
func (b *Broker) Beat(_ context.Context, id string, data []byte, ttl time.Duration) error {
	return b.locked(func() { b.beats[id] = beat{data: slices.Clone(data), until: time.Now().Add(ttl)} })
}

// Beats returns the data of every worker whose ttl has not run out, by
// worker ID; expired entries are dropped as they are read.
func (b *Broker) Beats(context.Context) (out [][]byte, err error) {
	err = b.locked(func() {
		now := time.Now()
		for _, id := range slices.Sorted(maps.Keys(b.beats)) {
			bt := b.beats[id]
			if !bt.until.After(now) {
				delete(b.beats, id)
				continue
			}
			out = append(out, slices.Clone(bt.data))
		}
	})
	return out, err
}

// Unbeat removes worker id's heartbeat.
func (b *Broker) Unbeat(_ context.Context, id string) error {
	return b.locked(func() { delete(b.beats, id) })
}

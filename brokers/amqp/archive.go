package amqpbroker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// The archive of a queue is its dead-letter queue NAME.dead, a classic
// queue: Archive (and Reject) publish an entry there, confirmed, and ack
// the delivery. AMQP cannot read a queue without taking its messages, so
// the archive is browsed: every entry taken with basic.get (manual ack) on
// a channel of its own, the ones a call removes acked, the others given
// back (basic.nack, requeue), which a classic queue puts back in their
// places. See docs/amqp.md, Archive.

// Headers of an archive entry (besides errand-reason and errand-not-before).
const (
	hdrError      = "errand-error"       // the last error's text
	hdrAttempts   = "errand-attempts"    // ArchiveEntry.Attempts
	hdrArchivedAt = "errand-archived-at" // Unix milliseconds
)

var _ driver.Archiver = (*Broker)(nil)

// browseLocks serialises the browsers of one dead queue within the
// process (every Broker value on the same URL): two browsers at once
// would each see only the entries the other did not hold.
var browseLocks sync.Map // url + "\x00" + dead queue → chan struct{}

func (b *Broker) browseLock(ctx context.Context, dead string) (unlock func(), err error) {
	v, _ := browseLocks.LoadOrStore(b.url+"\x00"+dead, make(chan struct{}, 1))
	lock := v.(chan struct{})
	select {
	case lock <- struct{}{}:
		return func() { <-lock }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("amqp broker: waiting for another browse of %s: %w", dead, ctx.Err())
	}
}

// Archive publishes e (d's message when e.ID is empty) to the queue's
// dead-letter queue, confirmed, then acks d: driver.ErrLeaseLost, with
// nothing archived, when d's lease is already lost (and, as for Release,
// when it ran out while the entry was being sent: the entry is then kept
// and the message may also run again). It then drops from the head of
// the archive the entries past keep.MaxCount and those archived more than
// keep.MaxAge ago (a failure there is logged: the entry is archived). An
// earlier entry of the same ID is dropped by the next browse (Archived,
// ArchivedEntry, Requeue, DeleteArchived).
func (b *Broker) Archive(ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	if err := b.checkClosed(); err != nil {
		return err
	}
	l, err := handle(d)
	if err != nil {
		return err
	}
	if !l.alive() {
		return driver.ErrLeaseLost
	}
	m := e.Message
	if m.ID == "" {
		m = d.Message
	}
	at := e.At
	if at.IsZero() {
		at = time.Now()
	}
	p := publishing(m, 0)
	if !m.NotBefore.IsZero() {
		p.Headers[hdrNotBefore] = m.NotBefore.UnixMilli()
	}
	p.Headers[hdrReason] = e.Reason
	p.Headers[hdrError] = e.Error
	p.Headers[hdrAttempts] = int64(e.Attempts)
	p.Headers[hdrArchivedAt] = at.UnixMilli()
	name := b.queueName(d.Queue)
	b.know(d.Queue)
	if err := b.sendDead(ctx, name, p); err != nil {
		return err
	}
	if err := l.ack(); err != nil {
		return err
	}
	if keep.MaxCount > 0 || keep.MaxAge > 0 {
		// The entry is archived and the delivery acked: a failed trim is
		// not Archive's failure (the next Archive trims again).
		if err := b.trim(ctx, name, keep); err != nil {
			b.log.Warn("amqp broker: drop archive entries past the retention", "queue", d.Queue, "err", err)
		}
	}
	return nil
}

// trim drops the entries at the head of the archive of name (the oldest)
// while there are more than keep.MaxCount or the head was archived more
// than keep.MaxAge ago. basic.get's answer counts the messages behind the
// one it gives, so trimming reads only what it drops, and one more.
func (b *Broker) trim(ctx context.Context, name string, keep driver.Retention) error {
	dead := deadName(name)
	cutoff := time.Now().Add(-keep.MaxAge)
	return b.browse(ctx, dead, func(ch *amqp.Channel) error {
		for {
			m, ok, err := ch.Get(dead, false)
			if err != nil || !ok {
				return err
			}
			count := int(m.MessageCount) + 1
			old := keep.MaxAge > 0 && archivedAt(m).Before(cutoff)
			if (keep.MaxCount > 0 && count > keep.MaxCount) || old {
				if err := ch.Ack(m.DeliveryTag, false); err != nil {
					return err
				}
				continue
			}
			return ch.Nack(m.DeliveryTag, false, true)
		}
	})
}

// browse runs fn on a channel of its own on the consuming connection,
// with the in-process lock of dead held, bounded by ctx and CallTimeout,
// and closes the channel after: RabbitMQ gives back whatever fn took and
// did not ack, and handles fn's acks before it answers the close.
func (b *Broker) browse(ctx context.Context, dead string, fn func(ch *amqp.Channel) error) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	unlock, err := b.browseLock(ctx, dead)
	if err != nil {
		return err
	}
	defer unlock()
	if err := b.declare(ctx, dead, b.deadArgs(), false); err != nil {
		return err
	}
	conn, err := b.con.connection(ctx)
	if err != nil {
		return err
	}
	var ch *amqp.Channel
	if err := b.con.run(ctx, func() (err error) { ch, err = conn.Channel(); return err }); err != nil {
		return fmt.Errorf("amqp broker: open channel: %w", err)
	}
	err = b.con.run(ctx, func() error {
		return errors.Join(fn(ch), ch.Close())
	})
	if err != nil {
		ch.Close()
		return fmt.Errorf("amqp broker: browse %s: %w", dead, err)
	}
	return nil
}

// entry is one message of an archive as a browse took it.
type entry struct {
	e   driver.ArchiveEntry
	tag uint64
}

// browseEntries takes every entry of queue's archive (as many as it held
// when the browse began), drops the older entries of an ID archived again,
// and calls fn with the others, oldest first; fn returns the indexes of
// the entries to remove (acked), and every other one is given back.
func (b *Broker) browseEntries(ctx context.Context, queue string, fn func(es []entry) ([]int, error)) error {
	dead := deadName(b.queueName(queue))
	b.know(queue)
	return b.browse(ctx, dead, func(ch *amqp.Channel) error {
		var es []entry
		for left := -1; left != 0; left-- {
			m, ok, err := ch.Get(dead, false)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if left < 0 {
				left = int(m.MessageCount) + 1 // a snapshot: what arrives later waits for the next browse
			}
			es = append(es, entry{e: archiveEntry(queue, m), tag: m.DeliveryTag})
		}
		// The newest entry of an ID replaces the older ones.
		last := map[string]int{}
		for i, x := range es {
			last[x.e.ID] = i
		}
		var kept []entry
		for i, x := range es {
			if last[x.e.ID] != i {
				if err := ch.Ack(x.tag, false); err != nil {
					return err
				}
				continue
			}
			kept = append(kept, x)
		}
		remove, err := fn(kept)
		if err != nil {
			return err
		}
		acked := map[uint64]bool{}
		for _, i := range remove {
			if err := ch.Ack(kept[i].tag, false); err != nil {
				return err
			}
			acked[kept[i].tag] = true
		}
		// Everything not acked goes back, in its place (a multiple nack
		// up to the last tag not acked: RabbitMQ refuses a tag it no
		// longer holds).
		for i := len(kept) - 1; i >= 0; i-- {
			if !acked[kept[i].tag] {
				return ch.Nack(kept[i].tag, true, true)
			}
		}
		return nil
	})
}

// archiveEntry reads an entry: errand's headers, or for a message
// RabbitMQ dead-lettered itself (a policy's delivery-limit, an operator's
// reject) its x-death reason. A message without a message-id gets an ID
// derived from its body, the same on every browse.
func archiveEntry(queue string, m amqp.Delivery) driver.ArchiveEntry {
	id := m.MessageId
	if id == "" {
		h := sha256.Sum256(m.Body)
		id = "amqp-" + hex.EncodeToString(h[:8])
	}
	e := driver.ArchiveEntry{
		Message: driver.Message{ID: id, Queue: queue, Body: m.Body, NotBefore: notBefore(m.Headers), Priority: m.Priority},
		At:      archivedAt(m),
	}
	e.Reason, _ = m.Headers[hdrReason].(string)
	e.Error, _ = m.Headers[hdrError].(string)
	if n, ok := toInt(m.Headers[hdrAttempts]); ok {
		e.Attempts = int(n)
	} else if n, ok := toInt(m.Headers[hdrAttempt]); ok {
		e.Attempts = int(n) // a Reject: the deliveries it counted
	}
	if e.Reason == "" {
		e.Reason = "dead-lettered by RabbitMQ"
		if ds, ok := m.Headers["x-death"].([]any); ok && len(ds) > 0 {
			if d, ok := ds[0].(amqp.Table); ok {
				if r, ok := d["reason"].(string); ok {
					e.Reason += ": " + r
				}
			}
		}
	}
	return e
}

// archivedAt is when m was archived: errand's header, else its AMQP
// timestamp (seconds).
func archivedAt(m amqp.Delivery) time.Time {
	if ms, ok := toInt(m.Headers[hdrArchivedAt]); ok {
		return time.UnixMilli(ms)
	}
	return m.Timestamp
}

// Archived browses the archive of queue (see the package doc) and returns
// up to limit entries, newest (last archived) first, skipping offset.
func (b *Broker) Archived(ctx context.Context, queue string, offset, limit int) ([]driver.ArchiveEntry, error) {
	if offset < 0 || limit < 1 {
		return nil, fmt.Errorf("amqp broker: archived: offset %d, limit %d: want offset ≥ 0 and limit ≥ 1", offset, limit)
	}
	if err := b.checkClosed(); err != nil {
		return nil, err
	}
	var out []driver.ArchiveEntry
	err := b.browseEntries(ctx, queue, func(es []entry) ([]int, error) {
		for i := len(es) - 1 - offset; i >= 0 && len(out) < limit; i-- {
			out = append(out, es[i].e)
		}
		return nil, nil
	})
	return out, err
}

// ArchivedEntry browses the archive of queue for the entry id.
func (b *Broker) ArchivedEntry(ctx context.Context, queue, id string) (driver.ArchiveEntry, error) {
	if err := b.checkClosed(); err != nil {
		return driver.ArchiveEntry{}, err
	}
	var found *driver.ArchiveEntry
	err := b.browseEntries(ctx, queue, func(es []entry) ([]int, error) {
		if i := slices.IndexFunc(es, func(x entry) bool { return x.e.ID == id }); i >= 0 {
			found = &es[i].e
		}
		return nil, nil
	})
	switch {
	case err != nil:
		return driver.ArchiveEntry{}, err
	case found == nil:
		return driver.ArchiveEntry{}, fmt.Errorf("amqp broker: %s in %s: %w", id, queue, driver.ErrNotArchived)
	}
	return *found, nil
}

// Requeue browses the archive of queue for the entry id, publishes m
// (confirmed) while the browse holds the entry, then acks the entry. Not
// one atomic step: a crash between the two leaves the entry in the
// archive and m published (a duplicate, never a loss). Within a process
// browses are serialised, and across processes the entry is held by one
// browse at a time, so of racing Requeues one publishes and the others
// answer ErrNotArchived.
func (b *Broker) Requeue(ctx context.Context, queue, id string, m driver.Message) error {
	if err := b.checkClosed(); err != nil {
		return err
	}
	if m.Queue == "" {
		m.Queue = queue
	}
	found := false
	err := b.browseEntries(ctx, queue, func(es []entry) ([]int, error) {
		i := slices.IndexFunc(es, func(x entry) bool { return x.e.ID == id })
		if i < 0 {
			return nil, nil
		}
		if err := b.Publish(ctx, m); err != nil {
			return nil, err
		}
		found = true
		return []int{i}, nil
	})
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("amqp broker: %s in %s: %w", id, queue, driver.ErrNotArchived)
	}
	return nil
}

// DeleteArchived browses the archive of queue and acks the entries ids.
func (b *Broker) DeleteArchived(ctx context.Context, queue string, ids ...string) (int, error) {
	if err := b.checkClosed(); err != nil {
		return 0, err
	}
	n := 0
	err := b.browseEntries(ctx, queue, func(es []entry) ([]int, error) {
		var rm []int
		for i, x := range es {
			if slices.Contains(ids, x.e.ID) {
				rm = append(rm, i)
			}
		}
		n = len(rm)
		return rm, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

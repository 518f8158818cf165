package amqpbroker

import (
	"context"
	"fmt"
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// Ack acks each delivery on its channel (basic.ack of its tag), then waits
// for a round trip on each channel it used (a passive declare of
// amq.direct) sent after its acks: RabbitMQ handles a channel's frames in
// order, so the answer says the acks were handled, and a silent server is
// an error within ctx and CallTimeout instead of acks lost unseen. The
// round trips are shared (see ackSync): concurrent Ack calls on a channel
// wait for one or two, not for a queue of their own. A delivery whose
// lease ran out, or whose channel closed since (RabbitMQ then gave the
// message back), fails with driver.ErrLeaseLost.
func (b *Broker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	var chans []*amqp.Channel
	errs := driver.EachItem(len(ds), func(i int) error {
		l, err := handle(ds[i])
		if err != nil {
			return err
		}
		if err := l.ack(); err != nil {
			return err
		}
		if !slices.Contains(chans, l.ch) {
			chans = append(chans, l.ch)
		}
		return nil
	})
	for _, ch := range chans {
		if err := b.acksOn(ch).confirm(ctx, b, ch); err != nil {
			for i, d := range ds {
				if l, _ := d.Handle.(*lease); l != nil && l.ch == ch && (errs == nil || errs[i] == nil) {
					if errs == nil {
						errs = make([]error, len(ds))
					}
					errs[i] = fmt.Errorf("amqp broker: ack not confirmed: %w", err)
				}
			}
		}
	}
	return errs
}

// roundTrip makes one synchronous call on ch, bounded by ctx and
// CallTimeout; a channel or connection that is gone or silent fails it.
func (b *Broker) roundTrip(ctx context.Context, ch *amqp.Channel) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.con.call(ctx, ch, func() error {
		return ch.ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil)
	})
}

// ackSync shares the round trips that confirm one channel's acks. It
// counts the acks written on the channel; a round trip answers for every
// ack written before it began (its request is sent after them, and
// RabbitMQ answers in order), so an Ack call waits for the round trip
// under way when that one began after its acks were written, else for the
// next one, which it starts itself when none is under way. Without it,
// each Ack call made a round trip of its own, one after the other (a
// channel takes one synchronous call at a time): concurrent calls queued
// for as many round trips as there were calls.
type ackSync struct {
	mu      sync.Mutex
	written uint64     // acks written on the channel
	covered uint64     // acks a finished round trip answered for
	flight  *ackFlight // the round trip under way, nil when none
}

// ackFlight is one round trip of an ackSync: it answers for the first
// covers acks written on the channel.
type ackFlight struct {
	covers uint64
	done   chan struct{} // closed when it ended
	err    error         // set before done is closed
}

// acksOn returns ch's ackSync.
func (b *Broker) acksOn(ch *amqp.Channel) *ackSync {
	if v, ok := b.acks.Load(ch); ok {
		return v.(*ackSync)
	}
	v, _ := b.acks.LoadOrStore(ch, &ackSync{})
	return v.(*ackSync)
}

// wrote counts an ack written on the channel.
func (s *ackSync) wrote() {
	s.mu.Lock()
	s.written++
	s.mu.Unlock()
}

// confirm returns once a round trip on ch that began after every ack
// written so far has answered, or with the error of that round trip, or
// with ctx's error.
func (s *ackSync) confirm(ctx context.Context, b *Broker, ch *amqp.Channel) error {
	s.mu.Lock()
	mark := s.written
	for {
		if s.covered >= mark {
			s.mu.Unlock()
			return nil
		}
		f := s.flight
		if f == nil {
			f = &ackFlight{covers: s.written, done: make(chan struct{})}
			s.flight = f
			s.mu.Unlock()
			f.err = b.roundTrip(ctx, ch)
			s.mu.Lock()
			if f.err == nil {
				s.covered = max(s.covered, f.covers)
			}
			s.flight = nil
			close(f.done)
			if f.err != nil {
				s.mu.Unlock()
				if ch.IsClosed() {
					b.acks.Delete(ch) // the channel's watch may have gone first
				}
				return f.err
			}
			continue
		}
		s.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("amqp broker: waiting for the round trip: %w", ctx.Err())
		}
		if f.err != nil && f.covers >= mark {
			return f.err
		}
		s.mu.Lock()
	}
}

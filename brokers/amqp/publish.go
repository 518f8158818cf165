package amqpbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// ErrBlocked is returned by every call that publishes (Publish, Release,
// Reject and the hops of delayed messages) while RabbitMQ blocks the
// broker's publishing connection: a memory or disk alarm. The error names
// RabbitMQ's reason. Consumers and acks go on, on their own connection.
var ErrBlocked = errors.New("amqp broker: RabbitMQ blocks publishing (a memory or disk alarm)")

// errConnLost marks a publish that failed because its connection or
// channel closed under it: send tries again on a new one.
var errConnLost = errors.New("amqp broker: connection lost")

// The delay levels: queues whose messages expire after 64ms × 2^k and are
// dead-lettered back to their errand queue.
const (
	baseLevel = 64 * time.Millisecond
	topLevel  = baseLevel << 24
)

// levelAtMost returns the longest level no longer than d (the shortest
// level when d is shorter).
func levelAtMost(d time.Duration) time.Duration {
	l := baseLevel
	for l*2 <= d && l < topLevel {
		l *= 2
	}
	return l
}

// outgoing is one message on its way to an AMQP queue.
type outgoing struct {
	queue string // the errand queue's AMQP name
	dead  bool   // to its dead-letter queue
	p     amqp.Publishing
}

// publishing encodes m for AMQP: errand's headers, persistent.
func publishing(m driver.Message, attempt int) amqp.Publishing {
	h := amqp.Table{}
	if !m.NotBefore.IsZero() {
		// Rounded up to the millisecond: never early.
		h[hdrNotBefore] = m.NotBefore.Add(time.Millisecond - 1).UnixMilli()
	}
	if attempt > 0 {
		h[hdrAttempt] = int64(attempt)
	}
	return amqp.Publishing{
		Headers:      h,
		MessageId:    m.ID,
		DeliveryMode: amqp.Persistent,
		Priority:     m.Priority,
		Timestamp:    time.Now(),
		Body:         m.Body,
	}
}

// Publish sends msgs with publisher confirms: it returns once RabbitMQ has
// taken every message (on quorum queues, a majority of their replicas
// has). A message due later goes to the delay level that fits it. Queues
// are declared on first use.
func (b *Broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if err := b.checkClosed(); err != nil {
		return err
	}
	outs := make([]outgoing, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			return errors.New("amqp broker: message without an ID")
		}
		if len(m.Body) > b.opts.MaxPayload {
			return fmt.Errorf("amqp broker: message %q: %d bytes: %w", m.ID, len(m.Body), driver.ErrPayloadTooLarge)
		}
		p, err := b.encode(m, 0)
		if err != nil {
			return err
		}
		outs[i] = outgoing{queue: b.queueName(m.Queue), p: p}
		b.know(m.Queue)
	}
	return b.send(ctx, outs)
}

// notBefore reads errand's not-before header.
func notBefore(h amqp.Table) time.Time {
	if ms, ok := toInt(h[hdrNotBefore]); ok && ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// target returns the AMQP queue o goes to now: its errand queue when due,
// else the delay level that fits what remains (the longest level not
// longer than it, the shortest when it is shorter: never early, at most
// one shortest level late).
func (b *Broker) target(o outgoing) (name string, args amqp.Table) {
	if b.opts.Machinery != nil {
		_, name, args = b.mTarget(o)
		return name, args
	}
	if o.dead {
		return deadName(o.queue), nil
	}
	nb := notBefore(o.p.Headers)
	if nb.IsZero() {
		return o.queue, nil
	}
	r := time.Until(nb)
	if r <= 0 {
		return o.queue, nil
	}
	level := levelAtMost(min(r, b.opts.MaxDelay))
	return delayName(o.queue, level), delayArgs(o.queue, level)
}

// send publishes outs with confirms, declaring their queues first. A
// message RabbitMQ returns as unroutable (its queue was deleted since it
// was declared) is sent once more after declaring again. A batch is sent
// in chunks of maxBatch messages, each bounded by CallTimeout on its own
// (within ctx), so a large batch on a healthy server does not run out of
// time part-way.
func (b *Broker) send(ctx context.Context, outs []outgoing) error {
	for len(outs) > maxBatch {
		if err := b.send(ctx, outs[:maxBatch]); err != nil {
			return err
		}
		outs = outs[maxBatch:]
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	lost := 0
	for try := 0; ; try++ {
		returned, err := b.sendOnce(ctx, outs)
		if errors.Is(err, errConnLost) && lost < 2 && ctx.Err() == nil && !b.closed.Load() {
			// The connection or channel was lost under the publish (the
			// broker had not noticed yet): once more on a new one. A
			// message RabbitMQ took before the loss is then sent twice.
			lost++
			try--
			continue
		}
		if err != nil || len(returned) == 0 {
			return err
		}
		if try > 0 {
			return fmt.Errorf("amqp broker: RabbitMQ could not route %d messages (first to %s): a queue missing after being declared", len(returned), returned[0].queue)
		}
		b.forget()
		outs = returned
	}
}

func (b *Broker) sendOnce(ctx context.Context, outs []outgoing) (returned []outgoing, err error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	targets, exchanges := make([]string, len(outs)), make([]string, len(outs))
	for i, o := range outs {
		name, args := b.target(o)
		targets[i], exchanges[i] = name, b.exchangeFor(o, name)
		if err := b.ensureQueue(ctx, o.queue); err != nil {
			return nil, err
		}
		if args != nil {
			if err := b.declare(ctx, name, args, true); err != nil {
				return nil, err
			}
		}
	}
	ch, err := b.pub.channel(ctx)
	if err != nil {
		return nil, err
	}
	if r := b.pub.blockedReason(); r != "" {
		return nil, fmt.Errorf("%w: %s", ErrBlocked, r)
	}
	tokens := make([]string, len(outs))
	err = b.pub.run(ctx, func() error {
		dcs := make([]*amqp.DeferredConfirmation, len(outs))
		for i, o := range outs {
			tokens[i] = strconv.FormatUint(b.token.Add(1), 36)
			p := o.p
			p.Headers = amqp.Table{}
			for k, v := range o.p.Headers {
				p.Headers[k] = v
			}
			p.Headers[hdrToken] = tokens[i]
			dc, err := ch.PublishWithDeferredConfirm(exchanges[i], targets[i], true, false, p)
			if errors.Is(err, amqp.ErrClosed) {
				return fmt.Errorf("%w: publish to %s: %w", errConnLost, targets[i], err)
			}
			if err != nil {
				return fmt.Errorf("amqp broker: publish to %s: %w", targets[i], err)
			}
			dcs[i] = dc
		}
		for i, dc := range dcs {
			select {
			case <-dc.Done():
			case <-ctx.Done():
				return ctx.Err()
			}
			if !dc.Acked() {
				if ch.IsClosed() {
					return fmt.Errorf("%w: publish to %s: channel closed before RabbitMQ confirmed it", errConnLost, targets[i])
				}
				return fmt.Errorf("amqp broker: RabbitMQ refused the message %s for %s (basic.nack)", outs[i].p.MessageId, targets[i])
			}
		}
		return nil
	})
	if err != nil {
		if r := b.pub.blockedReason(); r != "" {
			return nil, fmt.Errorf("%w: %s: %w", ErrBlocked, r, err)
		}
		return nil, err
	}
	b.drainReturns(ch)
	for i, tok := range tokens {
		if _, ok := b.returned.LoadAndDelete(tok); ok {
			returned = append(returned, outs[i])
		}
	}
	return returned, nil
}

// returns makes the channel amqp091 sends a publishing channel's
// basic.return messages on. RabbitMQ returns a mandatory message it cannot
// route before it confirms it, and amqp091 hands the return over before it
// reads the confirm, so sendOnce, once its confirms are in, drains the
// channel (drainReturns) and finds the return of any of its messages.
// Nothing else reads it: returns only follow publishes, and every publish
// drains; sendOnce sends at most maxBatch messages, well below the
// channel's room.
func (b *Broker) returns(ch *amqp.Channel) {
	b.rets.Store(ch, ch.NotifyReturn(make(chan amqp.Return, 4*maxBatch)))
}

// maxBatch is the most messages one sendOnce publishes.
const maxBatch = 1024

func (b *Broker) drainReturns(ch *amqp.Channel) {
	v, ok := b.rets.Load(ch)
	if !ok {
		return
	}
	c := v.(chan amqp.Return)
	for {
		select {
		case r, ok := <-c:
			if !ok {
				b.rets.Delete(ch)
				return
			}
			if tok, ok := r.Headers[hdrToken].(string); ok {
				b.returned.Store(tok, r.ReplyText)
			}
		default:
			return
		}
	}
}

// toInt reads an integer header, whatever width AMQP gave it.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), true
	}
	return 0, false
}

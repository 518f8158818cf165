package amqpbroker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// A puller is the consumer of one queue on the consuming connection: its
// own channel, a basic.consume with a prefetch of PrefetchMultiplier times
// the largest Fetch asked for (a worker's free slots), and a buffer of
// what RabbitMQ pushed and no Fetch has taken yet. Every delivery handed
// out carries a lease (see lease).
type puller struct {
	b     *Broker
	queue string // errand's name
	name  string // the AMQP queue

	pauseChecked atomic.Bool // a Fetch checked the queue's pause marker

	mu        sync.Mutex
	ch        *amqp.Channel // nil when none is open
	gen       uint64        // counts channels; a lease of an older one is lost
	tag       string        // the running consumer's tag; "" when none
	prefetch  int           // the running consumer's prefetch
	want      int           // the largest Fetch limit (or sum of waiting limits) so far
	need      int           // the most held unacked and asked for at once by a Fetch that found the window full
	settingUp bool
	err       error // the last setup failure, for the next Fetch
	buf       []buffered
	leases    map[*lease]struct{}
	waiting   int       // Fetch calls waiting now
	asking    int       // the sum of their limits
	lastFetch time.Time // when the last Fetch ended
	idle      *time.Timer
	wake      chan struct{} // closed when buf or err changes
	stopped   bool
}

type buffered struct {
	gen uint64
	tag string // the consumer's
	d   amqp.Delivery
}

// lease is a delivery's Handle. RabbitMQ keeps an unacked delivery with its
// channel for as long as the channel lives (consumer_timeout aside), so the
// lease is the broker's own: a timer that gives the message back
// (basic.nack, requeue) when it runs out unextended, and a state that
// tells a late settle it lost the message.
type lease struct {
	p        *puller
	gen      uint64
	consumer string // the tag of the consumer it came on
	ch       *amqp.Channel
	tag      uint64
	deadline time.Time
	timer    *time.Timer
	state    leaseState
}

type leaseState uint8

const (
	held leaseState = iota
	settled
	lost
)

var errClosed = driver.ErrClosed

func (b *Broker) puller(queue string) (*puller, error) {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	if b.closed.Load() {
		return nil, errClosed
	}
	p := b.pullers[queue]
	if p == nil {
		p = &puller{b: b, queue: queue, name: b.queueName(queue), leases: map[*lease]struct{}{}, wake: make(chan struct{})}
		b.pullers[queue] = p
	}
	return p, nil
}

// notify wakes the waiting Fetch calls. Call with p.mu held.
func (p *puller) notify() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// Fetch waits until the queue's consumer has at least one due message and
// returns up to limit of them, each leased for lease. The first Fetch of a
// queue starts its consumer (declaring the queue); a Fetch asking for more
// than any before raises the consumer's prefetch (see window). A message
// that arrives before its not-before time is sent on to the next delay
// level (and acked once RabbitMQ confirmed the copy), never returned.
func (b *Broker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	if err := b.checkClosed(); err != nil {
		return nil, err
	}
	p, err := b.puller(queue)
	if err != nil {
		return nil, err
	}
	if p.pauseChecked.CompareAndSwap(false, true) {
		// The first Fetch of the queue: a worker that starts on a paused
		// queue asked Paused before its Broker knew the queue.
		b.know(queue)
		if err := b.waitResumed(ctx, queue); err != nil {
			p.pauseChecked.Store(false)
			return nil, err
		}
	}
	p.mu.Lock()
	p.waiting++
	p.asking += limit
	defer func() {
		p.waiting--
		p.asking -= limit
		p.lastFetch = time.Now()
		p.armIdle()
		p.mu.Unlock()
	}()
	p.want = max(p.want, limit)
	began, retries := time.Now(), 0
	for {
		if p.stopped {
			return nil, errClosed
		}
		if out := p.take(limit, lease); len(out) > 0 {
			return out, nil
		}
		// A consumer is (re)started, with a larger prefetch, when there
		// is none or it is too small: for the window the Fetch limits ask
		// for, or for what the process holds unacked on it and the
		// waiting Fetch calls ask for (a caller holding more than the
		// window must not be starved). Windows only grow, so a consumer
		// is restarted a few times at most, never once per Fetch: a
		// worker's Fetch asks for at most its free slots, and what it
		// holds (running and settling) and asks for fits in 3× its slots.
		if held := p.held(p.tag) + p.asking; (p.tag == "" || held > p.prefetch || p.window() > p.prefetch) && !p.settingUp && p.err == nil {
			if p.tag != "" {
				p.need = max(p.need, held)
			}
			p.settingUp = true
			b.wg.Add(1)
			go p.setup()
		}
		if err := p.err; err != nil {
			p.err = nil
			// RabbitMQ unreachable, or restarting (a quorum queue takes a
			// moment to elect its leader): try again within this call for
			// up to CallTimeout, so an outage of a few seconds is not a
			// run of failed fetches (each one lengthening the worker's
			// back-off); report it after that.
			if time.Since(began) >= b.opts.CallTimeout {
				return nil, err
			}
			retries++
			p.mu.Unlock()
			t := time.NewTimer(min(50*time.Millisecond<<min(retries, 5), time.Second))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				p.mu.Lock()
				return nil, err
			case <-b.done:
				t.Stop()
				p.mu.Lock()
				return nil, errClosed
			}
			p.mu.Lock()
			continue
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			p.mu.Lock()
			return nil, ctx.Err()
		case <-b.done:
			p.mu.Lock()
			return nil, errClosed
		}
		p.mu.Lock()
	}
}

// take hands out up to limit due buffered messages under leases, and sends
// early ones on. On queues with priorities it hands out the highest first
// (as RabbitMQ would have; in arrival order within one priority): a
// message RabbitMQ pushed later, a released one say, may rank above those
// buffered before it. Call with p.mu held.
func (p *puller) take(limit int, leaseFor time.Duration) []*driver.Delivery {
	var out []*driver.Delivery
	now := time.Now()
	if top := p.b.maxPriority(); top > 0 && len(p.buf) > 1 {
		rank := func(bd buffered) int { return min(int(bd.d.Priority), top) }
		slices.SortStableFunc(p.buf, func(a, b buffered) int { return rank(b) - rank(a) })
	}
	keep := p.buf[:0]
	for _, bd := range p.buf {
		if bd.gen != p.gen || p.ch == nil {
			continue // its channel is gone: RabbitMQ has it back
		}
		if len(out) >= limit {
			keep = append(keep, bd)
			continue
		}
		if nb := p.b.deliveryNotBefore(bd.d); !nb.IsZero() && nb.After(now) {
			p.b.wg.Add(1)
			go p.hop(bd)
			continue
		}
		l := &lease{p: p, gen: bd.gen, consumer: bd.tag, ch: p.ch, tag: bd.d.DeliveryTag, deadline: now.Add(leaseFor)}
		l.timer = time.AfterFunc(leaseFor, l.expire)
		p.leases[l] = struct{}{}
		out = append(out, p.b.delivery(p.queue, bd.d, l))
	}
	clear(p.buf[len(keep):])
	p.buf = keep
	return out
}

// maxPriority is the x-max-priority of the broker's queues, 0 when they
// have no priorities.
func (b *Broker) maxPriority() int {
	if m := b.opts.Machinery; m != nil {
		n, _ := toInt(m.QueueDeclareArgs["x-max-priority"])
		return int(n)
	}
	if b.opts.Classic {
		return int(b.opts.MaxPriority)
	}
	return 0
}

// held counts the deliveries of consumer tag not yet settled, leased or
// buffered: what counts against its prefetch. Call with p.mu held.
func (p *puller) held(tag string) int {
	n := 0
	for l := range p.leases {
		if l.consumer == tag {
			n++
		}
	}
	for _, bd := range p.buf {
		if bd.tag == tag {
			n++
		}
	}
	return n
}

// window is the prefetch the queue's consumer needs: PrefetchMultiplier
// times the largest Fetch limit (or sum of the limits of the Fetch calls
// waiting at once), Options.Prefetch, or the most a Fetch that found the
// consumer full held and asked for, whichever is largest. RabbitMQ counts
// every unacked delivery against it, those settling too: a worker of N
// slots holds up to N running and N settling, so a window of 3N keeps up
// to N more ready, buffered, for the slots that free. Call with p.mu held.
func (p *puller) window() int {
	return max(p.b.opts.PrefetchMultiplier*max(p.want, p.asking), p.b.opts.Prefetch, p.need)
}

// delivery decodes d. Attempt counts every delivery: errand's own count of
// earlier ones (carried by a released copy), plus RabbitMQ's returns of
// this copy (x-delivery-count on quorum queues; on classic queues only
// the redelivered flag, so at least one).
func (b *Broker) delivery(queue string, d amqp.Delivery, l *lease) *driver.Delivery {
	if b.opts.Machinery != nil {
		d = b.mDecode(d)
	}
	attempt, _ := toInt(d.Headers[hdrAttempt])
	if n, ok := toInt(d.Headers["x-delivery-count"]); ok {
		attempt += n
	} else if d.Redelivered {
		attempt++
	}
	id := d.MessageId
	if id == "" {
		// A message another program sent without a message-id.
		id = "amqp-" + rand.Text()
	}
	return &driver.Delivery{
		Message: driver.Message{ID: id, Queue: queue, Body: d.Body, NotBefore: notBefore(d.Headers), Priority: d.Priority},
		Attempt: int(attempt) + 1,
		Handle:  l,
	}
}

// setup opens the puller's channel when it has none and starts (or
// restarts, with a larger prefetch) its consumer, off the caller's ctx:
// a Fetch that gives up must not kill the connection other leases live
// on. A failure is reported to the next Fetch.
func (p *puller) setup() {
	defer p.b.wg.Done()
	ctx, cancel := p.b.lifeCtx()
	defer cancel()
	err := p.consume(ctx)
	p.b.log.Debug("amqp broker: consumer setup", "queue", p.queue, "err", err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settingUp = false
	if err != nil && !p.stopped {
		p.err = err
	}
	p.notify()
}

func (p *puller) consume(ctx context.Context) error {
	b := p.b
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if err := b.ensureQueue(ctx, p.name); err != nil {
		return err
	}
	p.mu.Lock()
	ch, gen, oldTag, want := p.ch, p.gen, p.tag, p.window()
	p.mu.Unlock()
	if ch == nil || ch.IsClosed() {
		conn, err := b.con.connection(ctx)
		if err != nil {
			return err
		}
		if err := b.con.run(ctx, func() (err error) { ch, err = conn.Channel(); return err }); err != nil {
			return fmt.Errorf("amqp broker: open channel: %w", err)
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			ch.Close()
			return errClosed
		}
		p.gen++
		gen = p.gen
		p.ch, p.tag, p.prefetch, oldTag = ch, "", 0, ""
		p.mu.Unlock()
		closes := ch.NotifyClose(make(chan *amqp.Error, 1))
		b.wg.Add(1)
		go p.watch(gen, closes)
	}
	tag := "errand-" + strconv.FormatUint(b.token.Add(1), 36)
	// The consumer's reader is started by the call itself, not after it
	// returns: on this connection a call that outlives ctx goes on (see
	// session.run), and a basic.consume RabbitMQ answers late registers a
	// consumer all the same, which, unread, would hold up to want
	// messages unacked for as long as the channel lives. The reader's
	// share of wg is taken here (setup holds its own) and handed to the
	// call, or given back here when the call never ran (claim).
	var claim atomic.Bool
	b.wg.Add(1)
	err := b.con.call(ctx, ch, func() (err error) {
		if !claim.CompareAndSwap(false, true) {
			return errClosed // consume gave up before the call began
		}
		reading := false
		defer func() {
			if !reading {
				b.wg.Done()
			}
		}()
		if oldTag != "" {
			// The old consumer's unacked deliveries stay on the channel.
			if err := ch.Cancel(oldTag, false); err != nil {
				return err
			}
		}
		if err := ch.Qos(want, 0, false); err != nil {
			return err
		}
		deliveries, err := ch.Consume(p.name, tag, false, false, false, false, nil)
		if err != nil {
			return err
		}
		reading = true
		go p.read(gen, tag, deliveries)
		return nil
	})
	if err != nil {
		if claim.CompareAndSwap(false, true) {
			b.wg.Done()
		}
		b.forget() // the queue may be gone (deleted): declare it again
		return fmt.Errorf("amqp broker: consume %s: %w", p.name, err)
	}
	p.mu.Lock()
	if p.gen == gen {
		p.tag, p.prefetch = tag, want
	}
	p.mu.Unlock()
	return nil
}

// read moves one consumer's deliveries into the buffer until the consumer
// or its channel ends.
func (p *puller) read(gen uint64, tag string, deliveries <-chan amqp.Delivery) {
	defer p.b.wg.Done()
	for d := range deliveries {
		p.mu.Lock()
		switch {
		case p.gen != gen || p.ch == nil:
			// Its channel is gone (amqp091 hands over what it had
			// read before the close): RabbitMQ has it back.
		case p.stopped:
			// Close is closing the channel: RabbitMQ takes it back.
		default:
			p.buf = append(p.buf, buffered{gen: gen, tag: tag, d: d})
			p.notify()
			p.armIdle()
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	if p.gen == gen && p.tag == tag {
		p.tag = "" // cancelled by RabbitMQ (queue deleted) or channel closed
		p.notify()
	}
	p.mu.Unlock()
}

// watch waits for the puller's channel to close and then loses every
// lease taken on it: RabbitMQ gives their messages back to the queue.
func (p *puller) watch(gen uint64, closes chan *amqp.Error) {
	defer p.b.wg.Done()
	err := <-closes
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil && p.gen == gen {
		p.b.chLocks.Delete(p.ch)
		p.b.acks.Delete(p.ch)
	}
	if err != nil && !p.stopped {
		p.b.log.Warn("amqp broker: consumer channel closed; its unacked messages go back to the queue", "queue", p.queue, "err", err)
	}
	for l := range p.leases {
		if l.gen == gen {
			l.state = lost
			l.timer.Stop()
			delete(p.leases, l)
		}
	}
	if p.gen == gen {
		p.ch, p.tag, p.prefetch = nil, "", 0
		p.buf = p.buf[:0]
		p.notify()
	}
}

// armIdle schedules the give-back of buffered messages when no Fetch
// waits. Call with p.mu held.
func (p *puller) armIdle() {
	if len(p.buf) == 0 || p.waiting > 0 || p.stopped {
		return
	}
	if p.idle == nil {
		p.idle = time.AfterFunc(p.b.opts.HoldBuffered, p.giveBack)
	} else {
		p.idle.Reset(p.b.opts.HoldBuffered)
	}
}

// giveBack cancels the consumer when no Fetch has come for HoldBuffered
// and gives its buffered messages back, so a worker that stopped fetching
// (paused, shutting down, all slots busy) holds nothing another worker
// could run. The next Fetch consumes again.
//
// A buffered message never ran, so its give-back must not count as a
// delivery: a basic.nack with requeue would (x-delivery-count on a quorum
// queue, and its delivery-limit policy would dead-letter a message that
// never ran; the redelivered flag on a classic one). So each is sent again
// as a copy carrying the count of its earlier deliveries (errand-attempt,
// as hop does), and acked once RabbitMQ confirmed the copy: at least once,
// and the copy goes to the tail of the queue, behind what was published
// since, where a requeued message would keep its place. When the copy
// cannot be sent (the connection is blocked, RabbitMQ does not confirm),
// the message is given back with basic.nack after all.
func (p *puller) giveBack() {
	p.mu.Lock()
	if p.waiting > 0 || len(p.buf) == 0 || p.stopped || time.Since(p.lastFetch) < p.b.opts.HoldBuffered*9/10 {
		p.mu.Unlock()
		return
	}
	ch, tag, gen := p.ch, p.tag, p.gen
	var back []buffered
	for _, bd := range p.buf {
		if bd.gen == gen {
			back = append(back, bd)
		}
	}
	p.buf = nil
	p.tag, p.prefetch = "", 0
	p.notify()
	p.b.wg.Add(1) // Close waits for the copies (it cancels their send)
	p.mu.Unlock()
	defer p.b.wg.Done()
	if ch == nil {
		return
	}
	if tag != "" {
		ctx, cancel := p.b.bound(context.Background())
		err := p.b.con.call(ctx, ch, func() error { return ch.Cancel(tag, false) })
		cancel()
		if err != nil {
			p.b.log.Warn("amqp broker: cancel idle consumer", "queue", p.queue, "err", err)
		}
	}
	ctx, cancel := p.b.lifeCtx()
	defer cancel()
	p.sendBack(ctx, ch, gen, back)
}

// sendBack gives buffered messages back as giveBack says: a copy of each
// is published, and the original acked once the copy is confirmed, or
// given back with basic.nack when the copy failed.
func (p *puller) sendBack(ctx context.Context, ch *amqp.Channel, gen uint64, back []buffered) {
	for len(back) > 0 {
		chunk := back[:min(len(back), maxBatch)]
		back = back[len(chunk):]
		outs := make([]outgoing, len(chunk))
		for i, bd := range chunk {
			outs[i] = outgoing{queue: p.name, p: copyOf(bd.d)}
		}
		sent := p.b.send(ctx, outs)
		p.mu.Lock()
		current := p.gen == gen
		p.mu.Unlock()
		if !current {
			return // the channel is gone: RabbitMQ has the originals back
		}
		if sent != nil {
			p.b.log.Warn("amqp broker: send a buffered message back; giving it back with basic.nack", "queue", p.queue, "err", sent)
		}
		for _, bd := range chunk {
			var err error
			if sent == nil {
				err = ch.Ack(bd.d.DeliveryTag, false)
			} else {
				err = ch.Nack(bd.d.DeliveryTag, false, true)
			}
			if err != nil {
				p.b.log.Warn("amqp broker: give back a buffered message", "queue", p.queue, "err", err)
			}
		}
	}
}

// copyOf returns a copy of d to publish again, its errand-attempt header
// holding the count of d's earlier deliveries (errand's own, carried by an
// earlier copy, plus RabbitMQ's returns of this one), d itself not
// counted: what a copy of a message that never ran carries.
func copyOf(d amqp.Delivery) amqp.Publishing {
	m := amqp.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		AppId: d.AppId, Body: d.Body,
	}
	a, _ := toInt(d.Headers[hdrAttempt])
	n, ok := toInt(d.Headers["x-delivery-count"])
	if !ok && d.Redelivered {
		n = 1 // a classic queue: at least one earlier delivery
	}
	if n > 0 {
		m.Headers = copyTable(d.Headers)
		m.Headers[hdrAttempt] = a + n
	}
	m.Headers = withoutServerHeaders(m.Headers)
	return m
}

// hop sends a message that came back before its not-before time on to the
// next delay level, and acks it once RabbitMQ confirmed the copy; if the
// copy fails, the message is given back a second later.
func (p *puller) hop(bd buffered) {
	defer p.b.wg.Done()
	d := bd.d
	m := copyOf(d) // keeps the count of deliveries across the copy
	if nb := p.b.deliveryNotBefore(d); !nb.IsZero() {
		// machinery's ETA, for the next delay queue (errand's own header
		// gives the same time back).
		m.Headers[hdrNotBefore] = nb.Add(time.Millisecond - 1).UnixMilli()
	}
	ctx, cancel := p.b.lifeCtx()
	defer cancel()
	err := p.b.send(ctx, []outgoing{{queue: p.name, p: m}})
	p.mu.Lock()
	ch, current := p.ch, p.gen == bd.gen
	p.mu.Unlock()
	if !current {
		return // the channel is gone: RabbitMQ has the original back
	}
	if err != nil {
		p.b.log.Warn("amqp broker: send a delayed message on to its next delay level", "queue", p.queue, "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-t.C:
		case <-p.b.done:
			t.Stop()
			return
		}
		ch.Nack(d.DeliveryTag, false, true)
		return
	}
	ch.Ack(d.DeliveryTag, false)
}

// lifeCtx returns a ctx for the broker's own work, done at Close (or
// when cancel is called).
func (b *Broker) lifeCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-b.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func copyTable(t amqp.Table) amqp.Table {
	c := amqp.Table{}
	for k, v := range t {
		c[k] = v
	}
	return c
}

// withoutServerHeaders drops the headers RabbitMQ adds (x-death,
// x-delivery-count, ...) from a copy errand sends again: the x-death
// history of a message that hops through delay levels would otherwise
// grow with every hop.
func withoutServerHeaders(t amqp.Table) amqp.Table {
	c := amqp.Table{}
	for k, v := range t {
		if len(k) > 2 && k[:2] == "x-" {
			continue
		}
		c[k] = v
	}
	return c
}

// stop ends the puller (Close): waiting Fetch calls return ErrClosed,
// and what RabbitMQ pushes from now on is left to the channel's close.
// It returns the buffered messages, for Close to give back, with the
// channel they came on, its generation and the consumer's tag.
func (p *puller) stop() (ch *amqp.Channel, gen uint64, tag string, back []buffered) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.idle != nil {
		p.idle.Stop()
	}
	for l := range p.leases {
		l.timer.Stop()
		l.state = lost
	}
	clear(p.leases)
	for _, bd := range p.buf {
		if bd.gen == p.gen {
			back = append(back, bd)
		}
	}
	p.buf = nil
	p.notify()
	return p.ch, p.gen, p.tag, back
}

// release gives back, before Close closes the connections, the messages
// stop returned: a buffered message never ran, and the channel's close
// would count a delivery (see giveBack). Bounded by CallTimeout and 2s,
// as the connections' close is (a silent server must not hold Close);
// what it cannot give back goes back with the channel's close.
func (p *puller) release(ch *amqp.Channel, gen uint64, tag string, back []buffered) {
	if ch == nil || len(back) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(p.b.opts.CallTimeout, 2*time.Second))
	defer cancel()
	if tag != "" {
		if err := p.b.con.call(ctx, ch, func() error { return ch.Cancel(tag, false) }); err != nil {
			p.b.log.Warn("amqp broker: cancel the consumer at Close", "queue", p.queue, "err", err)
			return
		}
	}
	p.sendBack(ctx, ch, gen, back)
}

// ---- leases ----

func handle(d *driver.Delivery) (*lease, error) {
	l, ok := d.Handle.(*lease)
	if !ok || l == nil {
		return nil, fmt.Errorf("amqp broker: delivery %q has no AMQP lease (Handle %T)", d.ID, d.Handle)
	}
	return l, nil
}

// expire gives the message back when the lease ran out unextended.
func (l *lease) expire() {
	p := l.p
	p.mu.Lock()
	if l.state != held {
		p.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 {
		l.timer.Reset(left)
		p.mu.Unlock()
		return
	}
	l.state = lost
	delete(p.leases, l)
	p.mu.Unlock()
	if err := l.ch.Nack(l.tag, false, true); err != nil && !errors.Is(err, amqp.ErrClosed) {
		p.b.log.Warn("amqp broker: give back a delivery whose lease ran out", "queue", p.queue, "err", err)
	}
}

// settle ends the lease for an ack, a release or a reject, or answers
// ErrLeaseLost when it already ended.
func (l *lease) settle() error {
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.state != held || l.gen != p.gen {
		return driver.ErrLeaseLost
	}
	l.state = settled
	l.timer.Stop()
	delete(p.leases, l)
	return nil
}

// alive reports whether the lease is still held.
func (l *lease) alive() bool {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return l.state == held && l.gen == l.p.gen
}

func (l *lease) ack() error {
	if err := l.settle(); err != nil {
		return err
	}
	if err := l.ch.Ack(l.tag, false); err != nil {
		return fmt.Errorf("amqp broker: ack: %w (%w)", driver.ErrLeaseLost, err)
	}
	l.p.b.acksOn(l.ch).wrote()
	return nil
}

// Extend moves the lease's deadline lease from now: a local timer, since
// RabbitMQ keeps an unacked delivery for as long as its channel lives (up
// to the server's consumer_timeout; see the package doc). It then makes
// one round trip on the delivery's channel, so a channel lost or a
// silent server is an error, not an extension that holds nothing.
func (b *Broker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	l, err := handle(d)
	if err != nil {
		return err
	}
	p := l.p
	p.mu.Lock()
	if l.state != held || l.gen != p.gen {
		p.mu.Unlock()
		return driver.ErrLeaseLost
	}
	l.deadline = time.Now().Add(lease)
	l.timer.Reset(lease)
	p.mu.Unlock()
	if err := b.roundTrip(ctx, l.ch); err != nil {
		return fmt.Errorf("amqp broker: extend: %w", err)
	}
	return nil
}

// Release sends a copy of the message again (to a delay level when
// notBefore is ahead), carrying the count of its deliveries, and acks the
// delivery once RabbitMQ confirmed the copy. If the lease ran out while
// the copy was sent, the message may run twice: Release then answers
// ErrLeaseLost.
func (b *Broker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	l, err := handle(d)
	if err != nil {
		return err
	}
	if !l.alive() {
		return driver.ErrLeaseLost
	}
	m := d.Message
	m.NotBefore = notBefore
	pb, err := b.encode(m, d.Attempt)
	if err != nil {
		return err
	}
	if err := b.send(ctx, []outgoing{{queue: b.queueName(d.Queue), p: pb}}); err != nil {
		return err
	}
	return l.ack()
}

// Reject sends a copy of the message, with reason in its errand-reason
// header, to the queue's dead-letter queue NAME.dead, and acks the
// delivery once RabbitMQ confirmed the copy.
func (b *Broker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	l, err := handle(d)
	if err != nil {
		return err
	}
	if !l.alive() {
		return driver.ErrLeaseLost
	}
	p, err := b.encode(d.Message, d.Attempt)
	if err != nil {
		return err
	}
	delete(p.Headers, hdrNotBefore)
	p.Headers[hdrReason] = reason
	if err := b.sendDead(ctx, b.queueName(d.Queue), p); err != nil {
		return err
	}
	return l.ack()
}

// sendDead publishes p to NAME.dead.
func (b *Broker) sendDead(ctx context.Context, name string, p amqp.Publishing) error {
	return b.send(ctx, []outgoing{{queue: name, dead: true, p: p}})
}

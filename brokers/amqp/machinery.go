package amqpbroker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/machinerywire"
)

// machinery v2's AMQP defaults (its config.AMQPConfig in its examples and
// config.defaultCnf).
const (
	MachineryExchange     = "machinery_exchange"
	MachineryExchangeType = "direct"
	MachineryBindingKey   = "machinery_task"
	MachineryDefaultQueue = "machinery_tasks"
)

// MachineryOptions makes the broker speak machinery v2's AMQP format
// (Options.Machinery), for migrating from machinery without a flag day:
// errand workers take the tasks machinery producers publish to
// machinery's exchange and queues, and what errand publishes (retries,
// chain links, chord callbacks, new tasks) goes to machinery's exchange in
// machinery's JSON, where machinery workers take it too. The fields are
// machinery's config.AMQPConfig and DefaultQueue. See
// docs/migrating-from-machinery.md.
type MachineryOptions struct {
	// Exchange is machinery's exchange (amqp.exchange), declared durable.
	// Default: "machinery_exchange".
	Exchange string
	// ExchangeType is its type (amqp.exchange_type). Default: "direct".
	ExchangeType string
	// BindingKey binds DefaultQueue to the exchange, as machinery's worker
	// binds its queue (amqp.binding_key); with a direct exchange it is
	// also the routing key of a task that names none. Default:
	// "machinery_task".
	BindingKey string
	// DefaultQueue is machinery's default queue (default_queue). Default:
	// "machinery_tasks".
	DefaultQueue string
	// QueueDeclareArgs and QueueBindingArgs are machinery's
	// amqp.queue_declare_args and amqp.queue_binding_args: a queue must be
	// declared with the arguments it has. Default: none.
	QueueDeclareArgs amqp.Table
	QueueBindingArgs amqp.Table
}

func (o *MachineryOptions) defaults() {
	if o.Exchange == "" {
		o.Exchange = MachineryExchange
	}
	if o.ExchangeType == "" {
		o.ExchangeType = MachineryExchangeType
	}
	if o.BindingKey == "" {
		o.BindingKey = MachineryBindingKey
	}
	if o.DefaultQueue == "" {
		o.DefaultQueue = MachineryDefaultQueue
	}
}

// mQueueName is the AMQP queue of an errand queue in machinery's format:
// the queue's own name, as machinery's.
func (b *Broker) mQueueName(q string) string { return q }

// mEnsureQueue declares what machinery's producer and worker declare for
// queue name: the durable exchange, the durable classic queue with
// QueueDeclareArgs, bound with its own name as routing key (machinery's
// producer, direct exchange) and, for DefaultQueue, with BindingKey
// (machinery's worker); and errand's set-aside queue NAME.dead (classic,
// no arguments).
func (b *Broker) mEnsureQueue(ctx context.Context, name string) error {
	b.dmu.Lock()
	_, ok := b.declared[name]
	b.dmu.Unlock()
	if ok {
		return nil
	}
	m := b.opts.Machinery
	keys := []string{name}
	if name == m.DefaultQueue && m.BindingKey != name {
		keys = append(keys, m.BindingKey)
	}
	if m.ExchangeType != "direct" {
		keys = []string{m.BindingKey}
	}
	err := b.con.do(ctx, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(m.Exchange, m.ExchangeType, true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(deadName(name), true, false, false, false, b.deadArgs()); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, m.QueueDeclareArgs); err != nil {
			return err
		}
		for _, k := range keys {
			if err := ch.QueueBind(name, k, m.Exchange, false, m.QueueBindingArgs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("amqp broker: declare machinery's queue %s on exchange %s: %w", name, m.Exchange, err)
	}
	b.dmu.Lock()
	b.declared[name] = time.Now()
	b.dmu.Unlock()
	return nil
}

// mTarget returns the AMQP queue o goes to now, and the exchange to
// publish it through: machinery's exchange with the queue's name as
// routing key when due; else, through the default exchange, a delay queue
// that dead-letters it to machinery's exchange with that routing key when
// its time comes. Delays are rounded up (never early) to a grid of
// max(64ms, 1/32 of the delay's level), so a fleet needs a bounded number
// of delay queues (machinery declares one per distinct millisecond), and
// a machinery worker never takes an errand-delayed task early.
func (b *Broker) mTarget(o outgoing) (exchange, name string, args amqp.Table) {
	if o.dead {
		return "", deadName(o.queue), nil
	}
	nb := notBefore(o.p.Headers)
	r := time.Until(nb)
	if nb.IsZero() || r <= 0 {
		return b.opts.Machinery.Exchange, o.queue, nil
	}
	r = min(r, b.opts.MaxDelay)
	grid := max(baseLevel, levelAtMost(r)/32)
	d := (r + grid - 1) / grid * grid
	name, args = b.mDelayQueue(o.queue, d.Milliseconds())
	return "", name, args
}

// mDelayQueue is the delay queue of ms for queue (errand.delay.MS.EXCHANGE.
// QUEUE): its messages expire after ms and are dead-lettered to
// machinery's exchange with the queue's name as routing key; unused, it
// is deleted levelExpiry after its last message could have left it.
func (b *Broker) mDelayQueue(queue string, ms int64) (string, amqp.Table) {
	ex := b.opts.Machinery.Exchange
	return fmt.Sprintf("%s%d.%s.%s", mDelayPrefix, ms, ex, queue), amqp.Table{
		"x-message-ttl":             ms,
		"x-dead-letter-exchange":    ex,
		"x-dead-letter-routing-key": queue,
		"x-expires":                 ms + levelExpiry.Milliseconds(),
	}
}

const mDelayPrefix = "errand.delay."

// mKnownDelays returns the delay queues of queue this Broker declared
// (other processes' are beyond AMQP's reach: it cannot list queues), with
// their arguments.
func (b *Broker) mKnownDelays(queue string) map[string]amqp.Table {
	suffix := "." + b.opts.Machinery.Exchange + "." + queue
	out := map[string]amqp.Table{}
	b.dmu.Lock()
	defer b.dmu.Unlock()
	for n := range b.declared {
		rest, ok := strings.CutPrefix(n, mDelayPrefix)
		if !ok || !strings.HasSuffix(rest, suffix) {
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSuffix(rest, suffix), 10, 64)
		if err != nil {
			continue
		}
		name, args := b.mDelayQueue(queue, ms)
		out[name] = args
	}
	return out
}

// exchangeFor returns the exchange o is published through to target:
// machinery's when o goes to its queue, the default exchange otherwise.
func (b *Broker) exchangeFor(o outgoing, target string) string {
	if b.opts.Machinery == nil || o.dead || target != o.queue {
		return ""
	}
	return b.opts.Machinery.Exchange
}

// encode is the AMQP message of m: errand's (publishing), with the body
// in machinery's JSON in machinery's format (machinerywire.MachineryBody:
// RoutingKey set, a retry's RetryCount counting the retries left), as
// content-type application/json like machinery's.
func (b *Broker) encode(m driver.Message, attempt int) (amqp.Publishing, error) {
	p := publishing(m, attempt)
	if b.opts.Machinery == nil {
		return p, nil
	}
	body, err := machinerywire.MachineryBody(m.ID, m.Body, m.Queue)
	if err != nil {
		return p, fmt.Errorf("amqp broker: message %q: %w", m.ID, err)
	}
	p.Body, p.ContentType = body, "application/json"
	return p, nil
}

// deliveryNotBefore is when d may run: errand's not-before header, and in
// machinery's format the ETA of machinery's signature too (the later of
// the two): machinery gives its delay queues the ETA truncated to the
// millisecond, so a task may come back a moment early.
func (b *Broker) deliveryNotBefore(d amqp.Delivery) time.Time {
	nb := notBefore(d.Headers)
	if b.opts.Machinery == nil {
		return nb
	}
	var s struct{ ETA *time.Time }
	if json.Unmarshal(d.Body, &s) == nil && s.ETA != nil && s.ETA.After(nb) {
		return *s.ETA
	}
	return nb
}

// mDecode reads a delivery of machinery's queue as errand's: errand's body
// back (machinerywire.ErrandMessage), the task's UUID as its message-id
// when it carries none (machinery sends none), and machinery's ETA as
// errand's not-before header.
func (b *Broker) mDecode(d amqp.Delivery) amqp.Delivery {
	nb := b.deliveryNotBefore(d)
	id, body := machinerywire.ErrandMessage(d.Body)
	if d.MessageId == "" && id != "" {
		d.MessageId = id
	}
	d.Body = body
	if !nb.IsZero() {
		d.Headers = copyTable(d.Headers)
		d.Headers[hdrNotBefore] = nb.Add(time.Millisecond - 1).UnixMilli()
	}
	return d
}

// mStats counts machinery's queue (Pending), errand's NAME.dead, and
// (Delayed) the delay queues of queue this Broker declared: AMQP cannot
// list queues, so tasks other processes delayed (machinery's
// delay.MS.EXCHANGE.QUEUE queues, or another errand process's) are not
// counted.
func (b *Broker) mStats(ctx context.Context, queue string) (driver.QueueStats, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var st driver.QueueStats
	name := b.queueName(queue)
	if err := b.mEnsureQueue(ctx, name); err != nil {
		return st, err
	}
	var err error
	if st.Dead, err = b.declareCount(ctx, deadName(name), b.deadArgs()); err != nil {
		return st, err
	}
	if st.Pending, err = b.declareCount(ctx, name, b.opts.Machinery.QueueDeclareArgs); err != nil {
		return st, err
	}
	for n, args := range b.mKnownDelays(queue) {
		c, err := b.declareCount(ctx, n, args)
		if err != nil {
			return st, err
		}
		st.Delayed += c
	}
	st.InFlight = b.held(queue)
	return st, nil
}

// mPurge drops the ready messages of machinery's queue and of the delay
// queues of queue this Broker declared (not other processes' delay
// queues, which AMQP cannot list).
func (b *Broker) mPurge(ctx context.Context, queue string) (int, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	name := b.queueName(queue)
	if err := b.mEnsureQueue(ctx, name); err != nil {
		return 0, err
	}
	names := []string{name}
	for n, args := range b.mKnownDelays(queue) {
		if err := b.declare(ctx, n, args, true); err != nil {
			return 0, err
		}
		names = append(names, n)
	}
	total := 0
	for _, n := range names {
		var got int
		err := b.con.do(ctx, func(ch *amqp.Channel) (err error) {
			got, err = ch.QueuePurge(n, false)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("amqp broker: purge %s: %w", n, err)
		}
		total += got
	}
	return total, nil
}

// machineryParams reads format=machinery's URL parameters: exchange,
// exchange_type, binding_key, default_queue, and queue_declare_args and
// queue_binding_args as JSON objects (whole numbers become Go ints, as
// machinery's YAML gives them, so a queue is declared with the very
// arguments machinery declared it with).
func machineryParams(q url.Values) (*MachineryOptions, error) {
	m := &MachineryOptions{Exchange: q.Get("exchange"), ExchangeType: q.Get("exchange_type"), BindingKey: q.Get("binding_key"),
		DefaultQueue: q.Get("default_queue")}
	for key, dst := range map[string]*amqp.Table{"queue_declare_args": &m.QueueDeclareArgs, "queue_binding_args": &m.QueueBindingArgs} {
		v := q.Get(key)
		if v == "" {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(v)))
		dec.UseNumber()
		var t map[string]any
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("amqp broker: %s=%q: want a JSON object: %v", key, v, err)
		}
		for k, x := range t {
			if n, ok := x.(json.Number); ok {
				if i, err := n.Int64(); err == nil {
					t[k] = int(i)
				} else {
					t[k], _ = n.Float64()
				}
			}
		}
		*dst = amqp.Table(t)
	}
	return m, nil
}

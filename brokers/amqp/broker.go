package amqpbroker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/driver"
)

// Options configures a Broker. The zero value is usable.
type Options struct {
	// QueuePrefix starts the name of every queue the broker declares.
	// Default: "errand.".
	QueuePrefix string
	// Classic declares classic queues instead of quorum queues. Quorum
	// queues (the default) are replicated where the cluster has several
	// nodes, count deliveries on the server (x-delivery-count) and are
	// RabbitMQ's choice for data safety; classic queues are needed for
	// priorities (MaxPriority). Default: false (quorum).
	Classic bool
	// MaxPriority, with Classic, declares queues with x-max-priority so
	// that due messages are delivered highest Message.Priority first
	// (priorities above it count as MaxPriority). Quorum queues of
	// RabbitMQ 3.10 have no priorities: it is ignored without Classic.
	// Default: 0 (no priorities).
	MaxPriority uint8
	// MaxDelay is the longest delay level (a TTL queue) the broker
	// declares, rounded down to a level (64ms × 2^k, at most 2^24 × 64ms,
	// about 12.4 days). Longer ETAs hop through the longest level again.
	// Default: about 12.4 days. Tests set seconds.
	MaxDelay time.Duration
	// MaxPayload is the largest body the broker sends. RabbitMQ's own
	// max_message_size is 128 MiB in 3.10 (16 MiB from 4.0).
	// Default: 16 MiB.
	MaxPayload int
	// Prefetch is the least basic.qos prefetch count of a queue's
	// consumer (see PrefetchMultiplier). Default: 0.
	Prefetch int
	// PrefetchMultiplier sets a queue's consumer's basic.qos prefetch
	// count to this many times the largest limit a Fetch of the queue
	// asked for (a worker's slots), or Prefetch when larger; RabbitMQ
	// counts every delivery not yet acked against it. A worker of N
	// slots holds up to N deliveries running and N more settling (their
	// states being recorded, their ack on its way), so 1 lets settling
	// deliveries hold back the next ones; 3 leaves room for N more,
	// pushed ahead and buffered in the broker (leased to no one, handed
	// out by the next Fetch, given back after HoldBuffered without one).
	// Set 1 for long tasks, so that a busy worker holds nothing buffered
	// an idle one could run. Queues with priorities (MaxPriority, or
	// machinery's x-max-priority) default to 1: RabbitMQ orders by
	// priority only what it has not sent yet, so a message of higher
	// priority published later would wait behind those buffered. The
	// window grows beyond this to what the process holds unacked and its
	// Fetch calls ask for, when that is more (a Fetch is never starved by
	// the deliveries its caller holds). Default: 3 (1 on queues with
	// priorities).
	PrefetchMultiplier int
	// CallTimeout bounds every call to RabbitMQ (dial, declare, publish
	// and its confirm, stats), so a call whose ctx has no deadline still
	// returns when the server accepts connections but never answers. A ctx
	// deadline that comes sooner wins. Default: 10s.
	CallTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval: a connection whose server
	// says nothing for about three of them is closed and its deliveries
	// go back to their queues. Default: 5s.
	Heartbeat time.Duration
	// HoldBuffered is how long a message the server pushed to a queue's
	// consumer may wait for a Fetch before it is given back (the consumer
	// then stops until the next Fetch). Default: 1s.
	HoldBuffered time.Duration
	// Logger receives what the broker cannot return to a caller (a
	// connection lost, a blocked connection, a failed give-back).
	// Default: silent.
	Logger *slog.Logger
	// Dial, when set, opens the TCP connection (tests put a proxy here).
	// Default: net.Dialer with CallTimeout.
	Dial func(network, addr string) (net.Conn, error)
	// Machinery, when set, makes the broker speak machinery v2's AMQP
	// format on machinery's exchange and queues (machinery.go; URL
	// format=machinery). Default: nil (errand's own layout).
	Machinery *MachineryOptions
}

// Broker is a driver.Broker on RabbitMQ (AMQP 0-9-1). It is safe for
// concurrent use.
type Broker struct {
	url  string
	cfg  amqp.Config
	opts Options
	log  *slog.Logger

	pub *session // publishes and their confirms
	con *session // consumers, acks, declares, stats

	dmu      sync.Mutex
	declared map[string]time.Time // queue name → when declared

	cmu     sync.Mutex
	pullers map[string]*puller

	kmu   sync.Mutex
	known map[string]struct{} // errand queues published to, fetched from or named by an operator call

	chLocks  sync.Map // *amqp.Channel → chan struct{}: one synchronous call at a time (session.call)
	acks     sync.Map // consuming *amqp.Channel → its *ackSync
	rets     sync.Map // publishing *amqp.Channel → its chan amqp.Return
	returned sync.Map // publish token → RabbitMQ's reply text: messages it could not route
	token    atomic.Uint64

	closed atomic.Bool
	done   chan struct{}
	wg     sync.WaitGroup // the broker's own goroutines
}

var (
	_ driver.Broker        = (*Broker)(nil)
	_ driver.Limiter       = (*Broker)(nil)
	_ driver.Purger        = (*Broker)(nil)
	_ driver.StatsReporter = (*Broker)(nil)
)

// Headers errand sets on its messages.
const (
	hdrNotBefore = "errand-not-before" // Unix milliseconds
	hdrAttempt   = "errand-attempt"    // deliveries before this publish
	hdrReason    = "errand-reason"     // why a message was set aside
	hdrToken     = "errand-publish"    // matches a basic.return to its publish
)

// New returns a broker for the AMQP URL url (amqp://user:pass@host:port/vhost
// or amqps://...), with opts (may be nil). It connects lazily: the first
// call dials, and every call dials again after a lost connection. Open
// checks the server at once instead.
func New(url string, opts *Options) *Broker {
	b := &Broker{url: url, declared: map[string]time.Time{}, pullers: map[string]*puller{}, known: map[string]struct{}{}, done: make(chan struct{})}
	if opts != nil {
		b.opts = *opts
	}
	o := &b.opts
	if o.QueuePrefix == "" {
		o.QueuePrefix = "errand."
	}
	if o.MaxDelay <= 0 || o.MaxDelay > topLevel {
		o.MaxDelay = topLevel
	}
	o.MaxDelay = levelAtMost(o.MaxDelay)
	if o.MaxPayload <= 0 {
		o.MaxPayload = 16 << 20
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 5 * time.Second
	}
	if o.HoldBuffered <= 0 {
		o.HoldBuffered = time.Second
	}
	if o.Machinery != nil {
		m := *o.Machinery
		m.defaults()
		o.Machinery = &m
	}
	if o.PrefetchMultiplier <= 0 {
		o.PrefetchMultiplier = 3
		if b.maxPriority() > 0 {
			o.PrefetchMultiplier = 1 // messages buffered ahead escape RabbitMQ's priority order
		}
	}
	b.log = o.Logger
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.cfg = amqp.Config{Heartbeat: o.Heartbeat, Locale: "en_US", Properties: amqp.Table{"product": "errand amqpbroker"}}
	b.cfg.Dial = b.dialer()
	b.pub = newSession(b, "publish", true)
	b.con = newSession(b, "consume", false)
	return b
}

// bound returns ctx bounded by Options.CallTimeout, for one call.
func (b *Broker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

// Limits: MaxPayload, and the longest delay level as the native maximum
// delay.
func (b *Broker) Limits() driver.Limits {
	return driver.Limits{MaxPayload: b.opts.MaxPayload, MaxDelay: b.opts.MaxDelay}
}

// Ping dials (when not connected) and checks the server answers, within
// ctx and Options.CallTimeout.
func (b *Broker) Ping(ctx context.Context) error {
	_, err := b.con.channel(ctx)
	return err
}

// queueName returns the AMQP queue of errand queue q: the prefix and q,
// with a hash in place of the end of names too long for AMQP's 255 bytes
// (less room for the suffixes of delay and dead queues).
func (b *Broker) queueName(q string) string {
	if b.opts.Machinery != nil {
		return b.mQueueName(q)
	}
	n := b.opts.QueuePrefix + q
	if len(n) > 200 {
		h := sha256.Sum256([]byte(n))
		n = n[:180] + "~" + hex.EncodeToString(h[:8])
	}
	return n
}

func deadName(name string) string { return name + ".dead" }

func delayName(name string, level time.Duration) string {
	return name + ".delay." + strconv.FormatInt(level.Milliseconds(), 10)
}

// queueArgs are the arguments of an errand queue: its type, its
// dead-letter route (to NAME.dead through the default exchange, for what
// RabbitMQ itself dead-letters: a policy's delivery limit, an operator's
// reject) and, on classic queues, its priorities.
func (b *Broker) queueArgs(name string) amqp.Table {
	a := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": deadName(name)}
	if b.opts.Classic {
		if b.opts.MaxPriority > 0 {
			a["x-max-priority"] = int(b.opts.MaxPriority)
		}
	} else {
		a[amqp.QueueTypeArg] = amqp.QueueTypeQuorum
	}
	return a
}

// deadArgs are the arguments of NAME.dead, the archive: a classic queue
// whatever the queue's type, since browsing gives every entry back
// (basic.nack, requeue) and a classic queue puts it back in its place
// without counting a delivery, where a quorum queue counts each give-back
// towards a delivery limit (RabbitMQ 4.0 sets one by default) that would
// drop archived entries after some browses.
// Declared with x-queue-type classic, so a vhost whose default queue type
// is quorum (RabbitMQ 3.11+) still makes it classic; RabbitMQ takes it as
// equivalent to a classic queue declared without the argument.
func (b *Broker) deadArgs() amqp.Table {
	return amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}
}

// delayArgs are the arguments of a delay level: every message expires
// after the level's TTL and is dead-lettered, through the default
// exchange, to the errand queue it belongs to; an unused level queue is
// deleted 10 minutes after its last message could have left it.
func delayArgs(name string, level time.Duration) amqp.Table {
	return amqp.Table{
		"x-message-ttl":             level.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": name,
		"x-expires":                 (level + levelExpiry).Milliseconds(),
	}
}

const levelExpiry = 10 * time.Minute

// declare declares queue name (main, dead or a delay level) with its
// arguments once per connection, and a delay level again when its last
// declaration is old enough that x-expires could take it.
func (b *Broker) declare(ctx context.Context, name string, args amqp.Table, renew bool) error {
	b.dmu.Lock()
	at, ok := b.declared[name]
	b.dmu.Unlock()
	if ok && (!renew || time.Since(at) < levelExpiry/2) {
		return nil
	}
	_, err := b.declareCount(ctx, name, args)
	return err
}

// declareCount declares name and returns how many ready messages it holds.
func (b *Broker) declareCount(ctx context.Context, name string, args amqp.Table) (int, error) {
	var q amqp.Queue
	err := b.con.do(ctx, func(ch *amqp.Channel) (err error) {
		q, err = ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("amqp broker: declare queue %s: %w", name, err)
	}
	b.dmu.Lock()
	b.declared[name] = time.Now()
	b.dmu.Unlock()
	return q.Messages, nil
}

// forget drops every declaration remembered (a connection was lost: the
// server may have restarted, or an operator deleted a queue).
func (b *Broker) forget() {
	b.dmu.Lock()
	clear(b.declared)
	b.dmu.Unlock()
}

// ensureQueue declares an errand queue and its dead-letter queue.
func (b *Broker) ensureQueue(ctx context.Context, name string) error {
	if b.opts.Machinery != nil {
		return b.mEnsureQueue(ctx, name)
	}
	if err := b.declare(ctx, deadName(name), b.deadArgs(), false); err != nil {
		return err
	}
	return b.declare(ctx, name, b.queueArgs(name), false)
}

// Close wakes blocked Fetch calls, gives back the messages its consumers
// hold buffered (never handed out: sent again as copies, so that no
// delivery is counted, within CallTimeout), then closes the connections
// (deliveries not acked go back to their queues). A second Close is
// harmless.
func (b *Broker) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	b.cmu.Lock()
	ps := b.pullers
	b.pullers = map[string]*puller{}
	b.cmu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		ch, gen, tag, back := p.stop()
		wg.Go(func() { p.release(ch, gen, tag, back) })
	}
	wg.Wait()
	close(b.done)
	err := errors.Join(b.pub.close(), b.con.close())
	b.wg.Wait()
	return err
}

func (b *Broker) checkClosed() error {
	if b.closed.Load() {
		return driver.ErrClosed
	}
	return nil
}

package sqsbroker

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/errand-go/errand/driver"
)

// A poller keeps the receives of one queue (at one visibility timeout)
// going for every Fetch waiting on it: the Fetch calls of all of a
// worker's slots, and of every worker sharing the Broker, draw on one pool
// of concurrent ReceiveMessage calls and one buffer.
//
// Demand drives it: receives start, at most Options.Pollers at once, while
// the waiting Fetch calls want more than is buffered and asked for, each
// asking for what is still wanted (at most 10, SQS's maximum). Nothing is
// received for slots that are not free: a worker's Fetch of 50 runs five
// receives side by side, its Fetch of 1 one receive of 1. (Asking for 10
// whatever the demand saves receives, but parks messages in the buffer
// beyond the free slots: a worker with several queues then sees one
// queue's fetches answered from the buffer in microseconds and the next
// one take a round trip, and strict priority let a lower queue in.) The
// buffer holds what a Fetch did not take: a receive that landed after its
// Fetch left (ctx ended) or was served by another receive. A receive is never cancelled while a Fetch waits for it; once none
// waits, it is cut after its long-poll wait plus a second (a silent
// endpoint cannot hold a shut-down worker), like a single Fetch's receive.
//
// Buffered messages hold a visibility timeout that started when their
// receive began. A Fetch hands one out as it is when at most a tenth of its
// lease has gone by (the worker extends every third of a lease, counting
// from the hand-out); an older one has its visibility renewed first
// (ChangeMessageVisibilityBatch), and is dropped if SQS says the receipt
// is stale. Messages nobody takes within that tenth of a lease (every
// Fetch left: ctx ended, worker stopped) are given back at once
// (visibility 1 s, the least aws-sdk-go-v2 sends), and so are buffered
// messages and late receives when the Broker is closed.
type poller struct {
	b     *Broker
	queue string // errand queue
	name  string // SQS queue name
	vis   int32  // visibility timeout of every receive, seconds
	fresh time.Duration

	mu      sync.Mutex
	buf     []buffered
	want    int // messages the waiting Fetch calls want, in all
	waiters int // Fetch calls waiting
	asked   int // messages the receives in flight ask for, in all
	polls   int // receives in flight
	wake    chan struct{}
	// errGen counts failed receives; err is the last one's error, handed to
	// the Fetch calls that were waiting when it failed.
	errGen int
	err    error
	// idle is cancelled when no Fetch waits (see receive).
	idle       context.Context
	idleCancel context.CancelFunc
	linger     *time.Timer
}

type buffered struct {
	d     *driver.Delivery
	since time.Time // the receive began: the visibility timeout runs from here
}

// pollerKey names a poller: a queue and a visibility timeout.
type pollerKey struct {
	name string
	vis  int32
}

func (b *Broker) poller(queue, name string, lease time.Duration) *poller {
	vis := int32(max1(math.Ceil(lease.Seconds())))
	k := pollerKey{name, vis}
	b.pmu.Lock()
	defer b.pmu.Unlock()
	p := b.pollers[k]
	if p == nil {
		p = &poller{b: b, queue: queue, name: name, vis: vis, wake: make(chan struct{}),
			fresh: max(lease/10, 50*time.Millisecond)}
		if b.pollers == nil {
			b.pollers = map[pollerKey]*poller{}
		}
		b.pollers[k] = p
	}
	return p
}

// fetch waits for buffered messages and takes up to limit of them.
func (p *poller) fetch(ctx context.Context, limit int) ([]*driver.Delivery, error) {
	b := p.b
	p.mu.Lock()
	gen := p.errGen
	p.want += limit
	if p.waiters++; p.waiters == 1 {
		p.idle, p.idleCancel = context.WithCancel(context.Background())
	}
	var (
		took []buffered
		err  error
	)
	for {
		if b.closed.Load() {
			err = fmt.Errorf("sqs broker: %w", driver.ErrClosed)
			break
		}
		if len(p.buf) > 0 {
			n := min(limit, len(p.buf))
			took = append(took, p.buf[:n]...)
			clear(p.buf[:n])
			p.buf = p.buf[n:]
			break
		}
		if p.errGen != gen {
			err = p.err
			break
		}
		p.spawn()
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-b.done:
		case <-wake:
		}
		p.mu.Lock()
		if err != nil {
			break
		}
	}
	p.want -= limit
	if p.waiters--; p.waiters == 0 {
		p.idleCancel()
		p.armLinger()
	}
	p.mu.Unlock()
	if len(took) == 0 {
		return nil, err
	}
	return p.handOut(took), nil
}

// need is how many messages one more receive should ask for (0: none: the
// waiting Fetch calls want no more than is buffered and asked for); p.mu
// held.
func (p *poller) need() int {
	return min(p.want-len(p.buf)-p.asked, 10)
}

// spawn starts receives while the waiting Fetch calls want more than is
// buffered and asked for; p.mu held.
func (p *poller) spawn() {
	for p.polls < p.b.opts.Pollers {
		n := p.need()
		if n <= 0 {
			return
		}
		p.polls++
		p.asked += n
		go p.poll(p.idle, n)
	}
}

// poll is one receive of up to n messages into the buffer.
func (p *poller) poll(idle context.Context, n int) {
	b := p.b
	since := time.Now()
	var (
		out *sqs.ReceiveMessageOutput
		u   string
	)
	ctx := context.Background()
	err := b.withQueue(ctx, p.name, func(url string) error {
		u = url
		return b.receive(idle, url, n, p.vis, &out)
	})
	var late []*driver.Delivery // due, but the broker closed meanwhile
	if err == nil {
		var due []buffered
		for _, m := range out.Messages {
			d, ok := b.delivery(p.queue, u, m)
			if !ok {
				// A hop of a long delay: sent on, never handed out.
				if derr := b.deferUntilDue(ctx, d.Handle.(handle)); derr != nil && err == nil {
					err = derr
				}
				continue
			}
			due = append(due, buffered{d, since})
		}
		p.mu.Lock()
		if b.closed.Load() { // checked under p.mu: Close drains after setting it
			for _, x := range due {
				late = append(late, x.d)
			}
		} else {
			p.buf = append(p.buf, due...)
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.polls--
	p.asked -= n
	if err != nil {
		p.errGen++
		p.err = err
	}
	close(p.wake)
	p.wake = make(chan struct{})
	if p.waiters == 0 {
		p.armLinger()
	} else if err == nil && !b.closed.Load() {
		p.spawn()
	}
	p.mu.Unlock()
	if len(late) > 0 {
		b.giveBack(late)
	}
}

// armLinger gives back, after p.fresh, what is still buffered then with no
// Fetch waiting; p.mu held.
func (p *poller) armLinger() {
	if len(p.buf) == 0 {
		return
	}
	if p.linger == nil {
		p.linger = time.AfterFunc(p.fresh, p.expire)
		return
	}
	p.linger.Reset(p.fresh)
}

func (p *poller) expire() {
	p.mu.Lock()
	if p.waiters > 0 || len(p.buf) == 0 {
		p.mu.Unlock()
		return
	}
	var old []*driver.Delivery
	keep := p.buf[:0]
	for _, x := range p.buf {
		if time.Since(x.since) >= p.fresh {
			old = append(old, x.d)
		} else {
			keep = append(keep, x)
		}
	}
	clear(p.buf[len(keep):])
	p.buf = keep
	p.armLinger()
	p.mu.Unlock()
	p.b.giveBack(old)
}

// drain empties the buffer (Close); it returns what was buffered.
func (p *poller) drain() []*driver.Delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*driver.Delivery, len(p.buf))
	for i, x := range p.buf {
		out[i] = x.d
	}
	p.buf = nil
	if p.idleCancel != nil && p.waiters == 0 {
		p.idleCancel()
	}
	return out
}

// handOut returns the deliveries of took, renewing the visibility of those
// buffered longer than p.fresh first, and leaving out any whose receipt
// SQS no longer honours.
func (p *poller) handOut(took []buffered) []*driver.Delivery {
	out := make([]*driver.Delivery, 0, len(took))
	var old []*driver.Delivery
	for _, x := range took {
		if time.Since(x.since) < p.fresh {
			out = append(out, x.d)
		} else {
			old = append(old, x.d)
		}
	}
	if len(old) > 0 {
		errs := p.b.changeVisibility(context.Background(), old, p.vis)
		for i, d := range old {
			if errs[i] == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// giveBack makes ds visible again (1 s: aws-sdk-go-v2 drops a zero
// visibility timeout from the request).
func (b *Broker) giveBack(ds []*driver.Delivery) {
	b.changeVisibility(context.Background(), ds, 1)
}

// changeVisibility sets the visibility timeout of ds to secs with
// ChangeMessageVisibilityBatch, 10 per call, and returns one error per
// delivery.
func (b *Broker) changeVisibility(ctx context.Context, ds []*driver.Delivery, secs int32) []error {
	return b.inBatches(ds, func(u string, hs []handle, part []int, errs []error) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(part))
		for j, i := range part {
			entries[j] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), ReceiptHandle: aws.String(hs[i].receipt), VisibilityTimeout: secs}
		}
		cctx, cancel := b.bound(ctx)
		out, err := b.client.ChangeMessageVisibilityBatch(cctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(u), Entries: entries})
		cancel()
		if err != nil {
			for _, i := range part {
				errs[i] = b.leaseErr(err, hs[i])
			}
			return
		}
		for _, f := range out.Failed {
			j, convErr := strconv.Atoi(aws.ToString(f.Id))
			if convErr != nil || j < 0 || j >= len(part) {
				continue
			}
			i := part[j]
			errs[i] = b.leaseErr(&batchEntryError{code: aws.ToString(f.Code), msg: aws.ToString(f.Message)}, hs[i])
		}
	})
}

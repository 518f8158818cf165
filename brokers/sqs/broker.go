package sqsbroker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/machinerywire"
)

// Options configures a Broker.
type Options struct {
	// QueuePrefix starts every queue name. Default: "errand-".
	QueuePrefix string
	// NoCreate: missing queues are an error. Default: false, queues (and
	// their NAME-dead or NAME-dead.fifo dead-letter queues) are created on first use, and
	// created again, with the same attributes, when SQS says one no longer
	// exists (deleted, or a server that restarted empty); the call that
	// found it missing then runs once more. With NoCreate such a call fails
	// with an error naming the queue and saying it no longer exists.
	NoCreate bool
	// MaxHop is the longest delay given to SQS in one send (SQS's maximum is
	// 15 minutes). Longer ETAs hop: the message carries its absolute
	// not-before time and is sent on again when it arrives early.
	// Default: 15m. Tests set seconds.
	MaxHop time.Duration
	// FIFO uses FIFO queues (names end in .fifo): messages of one group are
	// delivered in send order, one group member in flight at a time.
	// Deduplication is by a hash of the body, which includes the task UUID and
	// its attempt, so a retry is not mistaken for a duplicate (deduplicating by
	// the UUID alone would drop every retry). Delays and releases use
	// ChangeMessageVisibility (FIFO queues have no per-message delay): a
	// release "at once" is one second late. Default: false.
	FIFO bool
	// MessageGroupID is the FIFO message group of every message: one group
	// is delivered strictly in order, one message in flight at a time.
	// Default: empty, each task its own group (tasks run in parallel; SQS's
	// deduplication still applies).
	MessageGroupID string
	// WaitTime is the long-poll wait of one receive. An idle Fetch notices a
	// cancelled ctx within it; an in-flight receive is never cancelled.
	// Default: 1s.
	WaitTime time.Duration
	// CallTimeout bounds every SQS call but the long-poll receive, so a call
	// whose ctx has no deadline still returns when the endpoint accepts
	// connections but never answers (the SDK's retries included). A ctx
	// deadline that comes sooner wins. The receive is bounded by WaitTime
	// plus 10s instead. Default: 10s.
	CallTimeout time.Duration
	// Pollers is the most ReceiveMessage calls (up to 10 messages each) one
	// queue has in flight at once on this Broker. Every Fetch of the queue shares
	// them and their buffer: Fetch calls waiting for n messages in all keep
	// up to ceil(n/10) receives going. Default: 8.
	Pollers int
	// Machinery makes the broker speak machinery v2's SQS format, for
	// migrating from machinery without a flag day
	// (docs/migrating-from-machinery.md): queue names are machinery's
	// routing keys as they are (QueuePrefix defaults to none), what errand
	// publishes is machinery's Signature JSON (its RoutingKey set, and a
	// retry's RetryCount counting the retries left, as machinery's does),
	// and what machinery sends is read as errand's. A machinery worker on
	// the queue ignores errand's message attributes, so it runs a task
	// hopping towards an ETA over MaxHop early (machinery itself refuses
	// delays over 15 minutes). Standard queues only. Default: false.
	Machinery bool
}

// Broker is a driver.Broker on Amazon SQS (standard queues). It is safe for
// concurrent use.
type Broker struct {
	client *sqs.Client
	opts   Options
	closed atomic.Bool

	mu    sync.Mutex
	urls  map[string]string // queue name → URL, as last looked up
	known map[string]bool   // queue names ever found or created
	names map[string]string // queue name → the errand queue last given for it

	done    chan struct{} // closed by Close
	pmu     sync.Mutex
	pollers map[pollerKey]*poller
}

var (
	_ driver.Broker        = (*Broker)(nil)
	_ driver.Limiter       = (*Broker)(nil)
	_ driver.Purger        = (*Broker)(nil)
	_ driver.StatsReporter = (*Broker)(nil)
)

// maxBody is SQS's 256 KiB message limit less room for errand's attributes.
const maxBody = 256*1024 - 1024

const (
	attrID        = "errand-id"
	attrNotBefore = "errand-not-before" // Unix milliseconds
	attrReason    = "errand-reason"
)

// New returns a broker on client. opts may be nil. Build client with
// RequestBodyWorkaround among its options (Open does): without it, a
// ReceiveMessage now and then fails after a 200 with "use of closed network
// connection", and the messages it received stay invisible for their lease.
func New(client *sqs.Client, opts *Options) *Broker {
	b := &Broker{client: client, urls: map[string]string{}, known: map[string]bool{}, names: map[string]string{}, done: make(chan struct{})}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.QueuePrefix == "" && !b.opts.Machinery {
		b.opts.QueuePrefix = "errand-"
	}
	if b.opts.MaxHop <= 0 || b.opts.MaxHop > 15*time.Minute {
		b.opts.MaxHop = 15 * time.Minute
	}
	if b.opts.WaitTime <= 0 {
		b.opts.WaitTime = time.Second
	}
	if b.opts.CallTimeout <= 0 {
		b.opts.CallTimeout = 10 * time.Second
	}
	if b.opts.Pollers <= 0 {
		b.opts.Pollers = 8
	}
	return b
}

// bound returns ctx bounded by Options.CallTimeout, for one SQS call.
func (b *Broker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

// Limits: 256 KiB less attributes; the native maximum delay is MaxHop.
func (b *Broker) Limits() driver.Limits {
	return driver.Limits{MaxPayload: maxBody, MaxDelay: b.opts.MaxHop, MaxAckBatch: 10}
}

// delaySeconds returns the SQS delay for a not-before time (rounded up: never
// early) and whether the message must hop again on arrival.
func (b *Broker) delaySeconds(notBefore time.Time) (int32, bool) {
	if notBefore.IsZero() {
		return 0, false
	}
	d := time.Until(notBefore)
	if d <= 0 {
		return 0, false
	}
	if d > b.opts.MaxHop {
		return int32(b.opts.MaxHop / time.Second), true
	}
	return int32(math.Ceil(d.Seconds())), false
}

func attrs(m driver.Message) map[string]types.MessageAttributeValue {
	a := map[string]types.MessageAttributeValue{
		attrID: {DataType: aws.String("String"), StringValue: aws.String(m.ID)},
	}
	if !m.NotBefore.IsZero() {
		a[attrNotBefore] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(m.NotBefore.UnixMilli()+1, 10))}
	}
	return a
}

// Publish sends msgs with SendMessageBatch, 10 per call and at most 256 KiB
// per call. Every body is checked before anything is sent (errand has
// already refused bodies over Limits().MaxPayload).
func (b *Broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if b.opts.Machinery {
		msgs = slices.Clone(msgs)
		for i, m := range msgs {
			// A body that is not its message's signature is opaque, as on
			// errand's own queues (its ID rides in the attributes).
			if body, ok := machinerywire.Translate(m.ID, m.Body, m.Queue); ok {
				msgs[i].Body = body
			}
		}
	}
	for _, m := range msgs {
		if m.ID == "" {
			return errors.New("sqs broker: message without an ID")
		}
		if !validBody(string(m.Body)) {
			return fmt.Errorf("sqs broker: message %q: body holds characters SQS cannot carry (only XML characters: no NUL or other control bytes)", m.ID)
		}
	}
	byQueue := map[string][]driver.Message{}
	var order []string
	for _, m := range msgs {
		if _, ok := byQueue[m.Queue]; !ok {
			order = append(order, m.Queue)
		}
		byQueue[m.Queue] = append(byQueue[m.Queue], m)
	}
	for _, q := range order {
		name := b.queueName(q)
		var batch []types.SendMessageBatchRequestEntry
		size := 0
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			var out *sqs.SendMessageBatchOutput
			err := b.withQueue(ctx, name, func(u string) (err error) {
				cctx, cancel := b.bound(ctx)
				defer cancel()
				out, err = b.client.SendMessageBatch(cctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: batch})
				if err != nil {
					return fmt.Errorf("sqs broker: send batch to %s: %w", name, err)
				}
				return nil
			})
			batch, size = nil, 0
			if err != nil {
				return err
			}
			if len(out.Failed) > 0 {
				f := out.Failed[0]
				return fmt.Errorf("sqs broker: %d of the batch refused: %s: %s", len(out.Failed), aws.ToString(f.Code), aws.ToString(f.Message))
			}
			return nil
		}
		for _, m := range byQueue[q] {
			if len(batch) == 10 || size+len(m.Body)+1024 > 256*1024 {
				if err := flush(); err != nil {
					return err
				}
			}
			e := types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(len(batch))), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs(m),
			}
			if b.opts.FIFO {
				h := sha256.Sum256(m.Body)
				group := b.opts.MessageGroupID
				if group == "" {
					group = m.ID
				}
				e.MessageGroupId = aws.String(group)
				e.MessageDeduplicationId = aws.String(hex.EncodeToString(h[:]))
			} else {
				e.DelaySeconds, _ = b.delaySeconds(m.NotBefore)
			}
			batch = append(batch, e)
			size += len(m.Body) + 1024
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// handle is a delivery's SQS receipt.
type handle struct {
	url, receipt string
	msg          driver.Message
}

// Fetch returns up to limit messages, waiting for at least one. The
// queue's receives (up to 10 messages each, several in flight) are shared by
// every Fetch of the queue on this Broker (see poller.go): a Fetch takes
// what is buffered, or waits for the receives its demand starts. A receive
// is never cancelled mid-flight (an emulator can lose a message that way):
// when ctx ends, Fetch returns at once; what the receives still bring is
// handed to the next Fetch or, if none comes within a tenth of the lease,
// given back. Messages that arrive before their not-before time (a hop of
// a long delay) are sent on again, not returned.
func (b *Broker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	name := b.queueName(queue)
	p := b.poller(queue, name, lease)
	for {
		if b.closed.Load() {
			return nil, fmt.Errorf("sqs broker: %w", driver.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ds, err := p.fetch(ctx, max(limit, 1))
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		// Every message taken had gone stale in the buffer: wait again.
	}
}

// receive is one long poll of the queue at u into *out. It is not cancelled
// with ctx (a poll cut short can swallow a message until its visibility
// timeout): it may finish its wait, plus a second, after ctx is done, and no
// longer, so a silent endpoint cannot hold a shutting-down worker.
func (b *Broker) receive(ctx context.Context, u string, limit int, vis int32, out **sqs.ReceiveMessageOutput) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.WaitTime+10*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(b.opts.WaitTime+time.Second, cancel)
		context.AfterFunc(rctx, func() { t.Stop() })
	})
	defer stop()
	var err error
	*out, err = b.client.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(u), MaxNumberOfMessages: int32(min(limit, 10)),
		WaitTimeSeconds: int32(max1(b.opts.WaitTime.Seconds())), VisibilityTimeout: vis,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return fmt.Errorf("sqs broker: receive: %w", err)
	}
	return nil
}

func max1(f float64) float64 { return math.Max(f, 1) }

func (b *Broker) delivery(queue, u string, m types.Message) (*driver.Delivery, bool) {
	msg := driver.Message{Queue: queue, Body: []byte(aws.ToString(m.Body)), ID: aws.ToString(m.MessageId)}
	if a, ok := m.MessageAttributes[attrID]; ok {
		msg.ID = aws.ToString(a.StringValue)
	}
	due := true
	if a, ok := m.MessageAttributes[attrNotBefore]; ok {
		ms, _ := strconv.ParseInt(aws.ToString(a.StringValue), 10, 64)
		msg.NotBefore = time.UnixMilli(ms)
		due = !time.Now().Before(msg.NotBefore)
	}
	n, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	attr, fromErrand := m.MessageAttributes[attrID]
	// What machinery sent is read as errand's; of what errand sent only a
	// body Publish translated (its UUID is its message's ID), never one it
	// passed on as it was.
	if b.opts.Machinery && (!fromErrand || machinerywire.UUID(msg.Body) == aws.ToString(attr.StringValue)) {
		// errand's body for the worker and the handle (a hop publishes it
		// again, in machinery's JSON).
		id, body := machinerywire.ErrandMessage(msg.Body)
		msg.Body = body
		if !fromErrand {
			// Sent by machinery: its ID is the task's UUID, and its ETA is
			// kept here (machinery truncates the delay it gives SQS to whole
			// seconds, so the message may arrive before it).
			if id != "" {
				msg.ID = id
			}
			var s struct{ ETA *time.Time }
			if json.Unmarshal(msg.Body, &s) == nil && s.ETA != nil && msg.NotBefore.IsZero() {
				msg.NotBefore = *s.ETA
				due = !time.Now().Before(msg.NotBefore)
			}
		}
	}
	return &driver.Delivery{Message: msg, Attempt: n, Handle: handle{url: u, receipt: aws.ToString(m.ReceiptHandle), msg: msg}}, due
}

// hopBackoff is how long a message whose hop could not be sent on stays
// invisible before it is received (and sent on) again.
const hopBackoff = 5 * time.Second

// deferUntilDue puts back a message that arrived before its not-before time: sent
// on again (standard queues), or made invisible until then (FIFO, where a
// re-send would be deduplicated away).
//
// The received copy is deleted only after the copy sent on is accepted. If
// the send fails, the received copy is released instead: invisible for
// hopBackoff (or until its not-before time, if sooner), so it is received
// again and sent on then, or delivered if due; it is never left invisible
// for the whole lease, nor lost. The error is returned either way.
func (b *Broker) deferUntilDue(ctx context.Context, h handle) error {
	if b.opts.FIFO {
		return b.hide(ctx, h, h.msg.NotBefore)
	}
	err := b.Publish(ctx, h.msg)
	if err == nil {
		return b.del(ctx, h)
	}
	err = fmt.Errorf("sqs broker: message %q arrived before its time (%s) and could not be sent on: %w", h.msg.ID, h.msg.NotBefore.UTC().Format(time.RFC3339), err)
	back := time.Now().Add(hopBackoff)
	if h.msg.NotBefore.Before(back) {
		back = h.msg.NotBefore
	}
	if herr := b.hide(ctx, h, back); herr != nil {
		// Not released: it comes back when the receive's visibility
		// timeout ends.
		return errors.Join(err, fmt.Errorf("sqs broker: release it for another hop: %w", herr))
	}
	return err
}

// hide sets the message's visibility timeout to reach notBefore (whole
// seconds, at least one, at most SQS's 12 hours; a longer wait hides again).
func (b *Broker) hide(ctx context.Context, h handle, notBefore time.Time) error {
	secs := max1(math.Ceil(time.Until(notBefore).Seconds()))
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(h.url), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: int32(math.Min(secs, 12*3600)),
	})
	return b.leaseErr(err, h)
}

// resend sends a copy of the message (with its not-before time) and deletes
// the original: SQS has no "visible now" without a zero visibility timeout,
// which aws-sdk-go-v2 drops from the request.
func (b *Broker) resend(ctx context.Context, u string, h handle) error {
	if err := b.Publish(ctx, h.msg); err != nil {
		return err
	}
	return b.del(ctx, h)
}

func (b *Broker) del(ctx context.Context, h handle) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(h.url), ReceiptHandle: aws.String(h.receipt)})
	return b.leaseErr(err, h)
}

// leaseErr maps a stale receipt handle, or a message whose queue was
// deleted, onto driver.ErrLeaseLost.
func (b *Broker) leaseErr(err error, h handle) error {
	if err == nil {
		return nil
	}
	id := h.msg.ID
	if queueMissing(err) {
		// The queue was deleted, and the message with it.
		return fmt.Errorf("sqs broker: message %q: %w: its queue %s no longer exists (deleted since the message was received)", id, driver.ErrLeaseLost, path.Base(h.url))
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight",
			"AWS.SimpleQueueService.MessageNotInflight", "AWS.SimpleQueueService.ReceiptHandleIsInvalid":
			return fmt.Errorf("sqs broker: message %q: %w (%s)", id, driver.ErrLeaseLost, ae.ErrorCode())
		}
	}
	return fmt.Errorf("sqs broker: %w", err)
}

func (b *Broker) handle(d *driver.Delivery) (handle, error) {
	h, ok := d.Handle.(handle)
	if !ok {
		return handle{}, fmt.Errorf("sqs broker: delivery %q was not fetched from this broker", d.ID)
	}
	return h, nil
}

// Release gives the message back, due at notBefore, with
// ChangeMessageVisibility: whole seconds and at least one, because
// aws-sdk-go-v2 drops a zero visibility timeout from the request (so "at
// once" means within a second). Beyond SQS's 12-hour maximum the message is
// sent again with its not-before time and the original deleted.
func (b *Broker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	h, err := b.handle(d)
	if err != nil {
		return err
	}
	h.msg.NotBefore = notBefore
	if time.Until(notBefore) > 12*time.Hour {
		return b.resend(ctx, h.url, h) // beyond a visibility timeout: hop
	}
	return b.hide(ctx, h, notBefore)
}

// Extend renews the visibility timeout (whole seconds, at least one).
func (b *Broker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	h, err := b.handle(d)
	if err != nil {
		return err
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err = b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(h.url), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: int32(max1(math.Ceil(lease.Seconds()))),
	})
	return b.leaseErr(err, h)
}

// Reject moves the message to the queue's dead-letter queue (NAME-dead;
// NAME-dead.fifo, a FIFO queue, for the FIFO queue NAME.fifo; created at
// the first reject and again if deleted, unless NoCreate) with the reason
// as an attribute, then deletes it.
func (b *Broker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	h, err := b.handle(d)
	if err != nil {
		return err
	}
	a := attrs(h.msg)
	delete(a, attrNotBefore)
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	a[attrReason] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(reason)}
	body := string(h.msg.Body)
	if body == "" || !validBody(body) {
		body = fmt.Sprintf("%q", body)
	}
	dead := deadName(b.queueName(d.Queue))
	err = b.withQueue(ctx, dead, func(u string) error {
		cctx, cancel := b.bound(ctx)
		defer cancel()
		in := &sqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(body), MessageAttributes: a}
		if b.opts.FIFO {
			// NAME-dead.fifo is a FIFO queue: it needs a group and a
			// deduplication ID (a second Reject of one message, after a
			// failed delete, is dropped as a duplicate).
			sum := sha256.Sum256([]byte(h.msg.ID + "\x00" + body))
			group := b.opts.MessageGroupID
			if group == "" {
				group = "dead-" + hex.EncodeToString(sum[:8])
			}
			in.MessageGroupId = aws.String(group)
			in.MessageDeduplicationId = aws.String(hex.EncodeToString(sum[:]))
		}
		if _, err := b.client.SendMessage(cctx, in); err != nil {
			return fmt.Errorf("sqs broker: dead-letter %s to %s: %w", d.ID, dead, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.del(ctx, h)
}

// validBody reports whether SQS accepts s as a body (XML characters only).
func validBody(s string) bool {
	for _, r := range s {
		if r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF) {
			continue
		}
		return false
	}
	return true
}

// Close makes later calls return driver.ErrClosed, makes blocked fetches
// return at once, and gives back (visibility 1 s) the buffered messages and
// those that receives still in flight bring.
func (b *Broker) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	close(b.done)
	b.pmu.Lock()
	ps := make([]*poller, 0, len(b.pollers))
	for _, p := range b.pollers {
		ps = append(ps, p)
	}
	b.pmu.Unlock()
	var ds []*driver.Delivery
	for _, p := range ps {
		ds = append(ds, p.drain()...)
	}
	if len(ds) > 0 {
		b.giveBack(ds)
	}
	return nil
}

// Stats reads SQS's approximate counts (eventually consistent on real SQS).
func (b *Broker) Stats(ctx context.Context, queue string) (driver.QueueStats, error) {
	var out *sqs.GetQueueAttributesOutput
	name := b.queueName(queue)
	err := b.withQueue(ctx, name, func(u string) (err error) {
		cctx, cancel := b.bound(ctx)
		defer cancel()
		out, err = b.client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
		if err != nil {
			return fmt.Errorf("sqs broker: stats of %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return driver.QueueStats{}, err
	}
	n := func(k types.QueueAttributeName) int { v, _ := strconv.Atoi(out.Attributes[string(k)]); return v }
	return driver.QueueStats{
		Pending:  n(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}, nil
}

// Purge empties the queue with PurgeQueue and returns the approximate
// number of visible and delayed messages it held.
func (b *Broker) Purge(ctx context.Context, queue string) (int, error) {
	st, err := b.Stats(ctx, queue)
	if err != nil {
		return 0, err
	}
	name := b.queueName(queue)
	err = b.withQueue(ctx, name, func(u string) error {
		cctx, cancel := b.bound(ctx)
		defer cancel()
		if _, err := b.client.PurgeQueue(cctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(u)}); err != nil {
			return fmt.Errorf("sqs broker: purge %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return st.Pending + st.Delayed, nil
}

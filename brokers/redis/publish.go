package redisbroker

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

// A publish takes one of two shapes, both one round trip:
//
//   - the transaction (MULTI ... EXEC of plain commands), on a single Redis
//     node (oneNode) when every message of the call is due now at priority
//     0 — what SendTask sends without an ETA or a priority: per queue
//     HSET K:msgs (the envelopes), HSET K:ids (Find's index), RPUSH
//     K:pending and LPUSH K:notify (the wake-ups); one SADD of the
//     queues to P:queues; the LTRIM of K:notify only when needed (see
//     queueTx). Redis runs a transaction as one step, as it runs a
//     script: no client sees a message queued without its envelope, or
//     an envelope never queued. It costs Redis about a third of the
//     script: no script to set up, no TIME, no Lua call per command.
//   - otherwise (a message delayed or of a priority, or a Redis Cluster,
//     where the queue's keys and P:queues hash to different slots and one
//     transaction cannot hold both) the SADD of the queues, then one
//     publishScript per queue, in a pipeline; a queue whose script found
//     it marked unlisted is added to the set again afterwards (relist).
//
// Every publish adds its queues to P:queues (an SADD of a member already
// there costs Redis O(1)), so the set heals within one publish of any
// process whatever emptied it: a Redis restarted without persistence, a
// FLUSHDB, a failover to a replica that had not received it (issue 31).
//
// Either way the co-located PENDING states (Colocation.Send) go first, in the
// same transaction or pipeline, and go-redis never sends the call twice
// (redisconn.NoRetry, redisconn.Once): a reply lost after the write is an
// error, not a second copy of every message.

// Publish enqueues msgs in one round trip (see above), which also adds
// the queues to the set Queues reads. Each queue's messages are stored
// atomically. A body over MaxPayload refuses the whole batch before
// anything is sent.
func (b *Broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	batch, err := b.preparePublish(msgs)
	if err != nil {
		return err
	}
	_, err = b.sendBatch(ctx, batch, nil)
	return b.err(ctx, err)
}

// sendBatch sends batch in one round trip, after the commands states
// queues (the carried PENDING states; nil: none), and returns those
// commands, whose outcome is the caller's to read. err is not nil when a
// message may not be stored and queued: the first error of the messages'
// commands. A failure of the queue set's SADD alone is not reported: the
// messages are queued, and a worker's Fetch adds its queue to the set
// anyway.
func (b *Broker) sendBatch(ctx context.Context, batch *publishBatch, states func(goredis.Pipeliner)) (stateCmds []goredis.Cmder, err error) {
	if batch.tx {
		pipe := b.rdb.TxPipeline()
		if states != nil {
			states(pipe)
		}
		n := pipe.Len()
		msgCmds := batch.queueTx(ctx, pipe)
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			// A command Redis refused as it was queued (an ACL user's
			// NOPERM) discarded the whole transaction (EXECABORT): its
			// refusal, naming the key, is the error.
			if terr := redisconn.TxErr(cmds, err); terr != err {
				return nil, terr
			}
			for _, c := range msgCmds {
				if e := c.Err(); e != nil && c != goredis.Cmder(batch.list) {
					return nil, e
				}
			}
			// go-redis does not stamp every failure on the commands (an
			// error while it connects): a transaction whose HSET has
			// neither reply nor error never ran.
			for _, q := range batch.queues {
				if q.store.Val() == nil {
					return nil, err
				}
			}
		}
		batch.afterTx()
		return cmds[:min(n, len(cmds))], nil
	}
	var (
		n       int
		scripts []*goredis.Cmd
	)
	cmds, err := b.pipelined(ctx, func(pipe goredis.Pipeliner, eval evalFunc) {
		if states != nil {
			states(pipe)
		}
		n = pipe.Len()
		scripts = batch.queue(ctx, pipe, eval)
	})
	if err != nil {
		if err := scriptsErr(scripts, err); err != nil {
			return nil, err
		}
	}
	batch.relist(ctx, scripts)
	return cmds[:min(n, len(cmds))], nil
}

// scriptsErr is the error of a publish whose pipeline failed with err:
// the first error of its scripts, or err when a script has neither a
// reply nor an error (never sent); nil when every script succeeded (the
// SADD of the queue set alone failed: the messages are queued, and a
// worker's Fetch adds the queue to the set anyway).
func scriptsErr(scripts []*goredis.Cmd, err error) error {
	for _, c := range scripts {
		if c.Err() != nil {
			return redisconn.PermErr(c, c.Err())
		}
		if c.Val() == nil {
			return err
		}
	}
	return nil
}

// publishBatch is a publish checked and grouped by queue, its messages'
// IDs in Redis drawn, ready to queue on a pipeline or a transaction: the
// one code path of Publish and of the co-located publish (Colocation.Send).
type publishBatch struct {
	b      *Broker
	tx     bool            // the transaction's shape (see above)
	queues []queueBatch    // in the order of their first message
	byName map[string]int  // index in queues, once there are many
	list   *goredis.IntCmd // the transaction's SADD to P:queues
	first  [1]queueBatch   // queues' array while there is one queue
}

// queueBatch is what a publish sends to one queue: in the transaction's
// shape txStride values per message (its message ID, envelope and task
// ID, each boxed once), else publishScript's ARGV (4 per message).
type queueBatch struct {
	queue string
	k     *keys
	args  []any
	wake  *goredis.IntCmd // the transaction's LPUSH of K:notify
	store *goredis.Cmd    // the transaction's HSET of K:msgs
}

// txStride is how many values of queueBatch.args a message takes in the
// transaction's shape.
const txStride = 3

// manyQueues is how many queues a batch looks up by a scan before it
// keeps a map of them.
const manyQueues = 8

// checkMessage refuses a message whose ID has a newline (the envelope's
// separator) or whose body is over MaxPayload.
func (b *Broker) checkMessage(m driver.Message) error {
	if strings.ContainsRune(m.ID, '\n') {
		return fmt.Errorf("redis broker: message ID %q contains a newline", m.ID)
	}
	if lim := b.opts.MaxPayload; lim > 0 && len(m.Body) > lim {
		return fmt.Errorf("redis broker: message %q: body of %d bytes over MaxPayload %d: %w", m.ID, len(m.Body), lim, driver.ErrPayloadTooLarge)
	}
	return nil
}

// preparePublish refuses msgs if one fails checkMessage, else groups them
// by queue, in the transaction's shape where it serves.
func (b *Broker) preparePublish(msgs []driver.Message) (*publishBatch, error) {
	tx := oneNode(b.rdb)
	for _, m := range msgs {
		if err := b.checkMessage(m); err != nil {
			return nil, err
		}
		if !m.NotBefore.IsZero() || m.Priority != 0 {
			tx = false
		}
	}
	p := &publishBatch{b: b, tx: tx}
	p.queues = p.first[:0]
	for i, m := range msgs {
		q := p.of(m.Queue)
		env := make([]byte, 0, len(m.ID)+1+len(m.Body))
		env = append(append(append(env, m.ID...), '\n'), m.Body...)
		if q.args == nil {
			// Room for the rest of msgs, or a few (several queues).
			q.args = make([]any, 0, 4*min(len(msgs)-i, 16))
		}
		if tx {
			q.args = append(q.args, b.messageID(m), env, m.ID)
		} else {
			q.args = append(q.args, b.messageID(m), env, dueMillis(m.NotBefore), m.Priority)
		}
	}
	return p, nil
}

// of returns the batch of queue, added at the end if new.
func (p *publishBatch) of(queue string) *queueBatch {
	if n := len(p.queues); n > 0 && p.queues[n-1].queue == queue {
		return &p.queues[n-1]
	}
	if p.byName != nil {
		if i, ok := p.byName[queue]; ok {
			return &p.queues[i]
		}
	} else {
		for i := range p.queues {
			if p.queues[i].queue == queue {
				return &p.queues[i]
			}
		}
	}
	p.queues = append(p.queues, queueBatch{queue: queue, k: p.b.keyRef(queue)})
	if len(p.queues) > manyQueues {
		if p.byName == nil {
			p.byName = make(map[string]int, 2*manyQueues)
			for i, q := range p.queues {
				p.byName[q.queue] = i
			}
		}
		p.byName[queue] = len(p.queues) - 1
	}
	return &p.queues[len(p.queues)-1]
}

// queue queues the batch on pipe in the script's shape: the SADD of its
// queues to the set Queues reads, then one publish script per queue,
// whose commands it returns. An empty batch queues nothing.
func (p *publishBatch) queue(ctx context.Context, pipe goredis.Pipeliner, eval evalFunc) []*goredis.Cmd {
	if len(p.queues) == 0 {
		return nil
	}
	pipe.SAdd(ctx, p.b.global("queues"), p.names()...)
	scripts := make([]*goredis.Cmd, len(p.queues))
	for i, q := range p.queues {
		scripts[i] = eval(publishScript, ctx, pipe, q.k.publishKeys(), q.args...)
	}
	return scripts
}

// names returns the batch's queues, boxed for a command.
func (p *publishBatch) names() []any {
	out := make([]any, len(p.queues))
	for i, q := range p.queues {
		out[i] = q.queue
	}
	return out
}

// queueTx queues the batch on a transaction (see above) and returns the
// commands that store and queue its messages. The first goes as
// redisconn.Once, so go-redis never sends the transaction twice.
//
// Two commands differ from the script's:
//   - the SADD of the batch's queues to P:queues is in the transaction,
//     one for every queue; the script's DEL of K:unlisted is not: the
//     queue is listed in the same step as its messages are queued, so a
//     Queues that took it out before the transaction finds it listed
//     after, and one that takes it out meanwhile puts it back (its
//     relistScript finds the queue not empty, unless nothing of it
//     remains by then);
//   - the LTRIM of K:notify, which the script runs every time: here the
//     reply of the LPUSH tells the list's length, and once it is over
//     wakeKeep the next transaction of the queue trims it to wakeTrimTo,
//     so an idle queue's list stays near wakeKeep tokens, trimmed once
//     every wakeKeep-wakeTrimTo publishes.
func (p *publishBatch) queueTx(ctx context.Context, pipe goredis.Pipeliner) []goredis.Cmder {
	if len(p.queues) == 0 {
		return nil
	}
	cmds := make([]goredis.Cmder, 0, 5*len(p.queues)+1)
	list := p.queues[0].k.tx.list // SADD P:queues QUEUE, boxed once
	if len(p.queues) > 1 {
		list = make([]any, 0, 2+len(p.queues))
		list = append(list, "sadd", p.b.global("queues"))
	}
	for i := range p.queues {
		q := &p.queues[i]
		t := q.k.tx
		n := len(q.args) / txStride
		wakes := min(n, wakeBurst)
		// One array for every command's arguments.
		args := make([]any, 0, 2+2*n+2+2*n+2+n+2+wakes)
		hset := append(args, "hset", t.msgs)
		for i := 0; i < len(q.args); i += txStride {
			hset = append(hset, q.args[i], q.args[i+1]) // message ID, envelope
		}
		ids := append(hset[len(hset):], "hset", t.ids)
		for i := 0; i < len(q.args); i += txStride {
			ids = append(ids, q.args[i+2], q.args[i]) // task ID, message ID
		}
		push := append(ids[len(ids):], "rpush", t.pending)
		for i := 0; i < len(q.args); i += txStride {
			push = append(push, q.args[i])
		}
		wake := t.wake1
		if wakes > 1 {
			wake = append(push[len(push):], "lpush", t.notify)
			for range wakes {
				wake = append(wake, "1")
			}
		}
		q.wake = goredis.NewIntCmd(ctx, wake...)
		q.store = goredis.NewCmd(ctx, hset...)
		cmds = append(cmds,
			redisconn.Once(q.store),
			goredis.NewIntCmd(ctx, ids...),
			goredis.NewIntCmd(ctx, push...),
			q.wake)
		if t.overfull.Swap(false) {
			cmds = append(cmds, goredis.NewStatusCmd(ctx, t.trim...))
		}
		if len(p.queues) > 1 {
			list = append(list, q.queue)
		}
	}
	p.list = goredis.NewIntCmd(ctx, list...)
	cmds = append(cmds, p.list)
	_ = pipe.BatchProcess(ctx, cmds...) // one append
	return cmds
}

// afterTx reads the replies of a transaction that stored the batch's
// messages (see queueTx): it marks the wake-up lists to trim.
func (p *publishBatch) afterTx() {
	for i := range p.queues {
		if q := &p.queues[i]; q.wake.Val() > wakeKeep {
			q.k.tx.overfull.Store(true)
		}
	}
}

// wakeTrimTo is how many wake-up tokens the transaction's LTRIM leaves
// on an overfull K:notify (see queueTx).
const wakeTrimTo = wakeKeep / 2

// txArgs are a queue's keys and constant commands for the transaction
// (and the SADD every fetch sends too), boxed once (keys.tx), and whether
// its wake-up list needs a trim.
type txArgs struct {
	msgs, ids, pending, notify any
	wake1                      []any // LPUSH K:notify 1
	trim                       []any // LTRIM K:notify 0 wakeTrimTo-1
	list                       []any // SADD P:queues QUEUE (publish and fetch)
	// overfull: a LPUSH of K:notify answered more than wakeKeep tokens;
	// the next transaction trims the list.
	overfull atomic.Bool
}

func newTxArgs(k *keys, queues, queue string) *txArgs {
	return &txArgs{
		msgs: k.msgs, ids: k.ids, pending: k.pending, notify: k.notify,
		wake1: []any{"lpush", k.notify, "1"},
		trim:  []any{"ltrim", k.notify, 0, wakeTrimTo - 1},
		list:  []any{"sadd", queues, queue},
	}
}

// relist puts back into the queue set, after the publish scripts
// answered, the queues whose script found them marked unlisted (Queues
// took them out for being empty): the SADD queued before the scripts may
// have run before that removal. Best effort, like the pipeline's SADD: a
// worker's Fetch adds its queue too.
func (p *publishBatch) relist(ctx context.Context, scripts []*goredis.Cmd) {
	var qs []any
	for i, c := range scripts {
		if r, _ := c.Slice(); len(r) == 2 && r[1] == int64(1) {
			qs = append(qs, p.queues[i].queue)
		}
	}
	if len(qs) > 0 {
		p.b.rdb.SAdd(ctx, p.b.global("queues"), qs...)
	}
}

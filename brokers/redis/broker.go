package redisbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
	"github.com/errand-go/errand/internal/statejson"
)

// Options configures a Broker.
type Options struct {
	// Prefix starts every key the broker writes. Default: "errand".
	Prefix string
	// MaxPayload is the largest message body accepted, in bytes: errand
	// refuses a larger message before anything is written (an error
	// satisfying errors.Is(err, errand.ErrPayloadTooLarge)), and so does
	// Publish. It is also the largest body Fetch delivers: a larger
	// message that reached the queue anyway (pushed by another program,
	// or published through a broker with a larger bound) is set aside in
	// the queue's archive by the fetch script itself, with a reason naming
	// its size and the bound, and never sent to a worker (package doc,
	// Limits). Negative: no limit beyond Redis's own 512 MB per string.
	// Default (0): DefaultMaxPayload, 1 MiB.
	MaxPayload int
	// MaxBlock bounds one blocking wait of an idle Fetch, so a cancelled
	// ctx or a Close is noticed within it. Publishes wake a blocked Fetch at
	// once whatever this is. Default: 250ms.
	MaxBlock time.Duration
	// CallTimeout bounds each call to Redis that has no earlier ctx
	// deadline (a blocking fetch waits MaxBlock on top). It takes effect
	// on clients that honour ctx deadlines: ContextTimeoutEnabled, which
	// clients made by Open have; set it on your own. Negative: no bound
	// beyond the client's own timeouts. Default: 10s.
	CallTimeout time.Duration
	// CloseClient: Close also closes the client. Set by Open, which makes
	// its own client. Default: false (the caller owns the client).
	CloseClient bool
	// ArchiveMaxCount bounds the archive of each queue when Reject writes
	// to it: the oldest entries beyond it go, in the same step. (Archive
	// takes its bound from its caller: errand's
	// WorkerConfig.ArchiveRetention.) Negative: no bound. Default:
	// DefaultArchiveMaxCount, 10000.
	ArchiveMaxCount int
	// ArchiveMaxAge: Reject also drops the entries of the queue's archive
	// archived longer ago than this. Negative: no bound. Default:
	// DefaultArchiveMaxAge, 90 days.
	ArchiveMaxAge time.Duration
	// CompletedMax is how many of its most recently acked messages each
	// queue keeps (ID, body and ack time) for List(ListCompleted), written
	// by the ack itself. Each is held in Redis's memory like a queued
	// message. Negative: none (acks are still counted). Default:
	// DefaultCompletedMax, 1000.
	CompletedMax int
	// CompletedMaxAge: a queue whose only remains are completed messages
	// all acked longer ago than this (by the server's clock) counts as
	// empty, and Queues takes it out of the queue set; the messages stay
	// (CompletedMax bounds them). Negative: a queue with any completed
	// message stays listed. Default: DefaultCompletedMaxAge, 7 days.
	CompletedMaxAge time.Duration
	// Logger receives go-redis's own log lines (connection errors, pool
	// warnings), at Warn with the attribute component=go-redis. go-redis
	// has one logger per process: errand replaces its stderr logger on the
	// first New or Open of a Redis broker or backend, and its lines go to
	// the most recent non-nil Logger given to either, in any Options.
	// Default: nil, which discards them unless another broker or backend
	// set one.
	Logger *slog.Logger
}

// DefaultMaxPayload is the largest message body a Broker accepts unless
// Options.MaxPayload says otherwise: 1 MiB. A task's arguments travel in
// the body; larger data belongs in a store the task reads (pass its key).
// The bound keeps one careless producer from filling Redis's memory (every
// byte of a queued message is held in RAM until it is acked) and one
// message from costing a worker a large decode. errand's SQS broker takes
// 256 KiB, Kafka 1 MB by default; asynq and Celery set no bound of their own.
const DefaultMaxPayload = 1 << 20

// The defaults of the archive's retention under Reject and of the
// completed list (see Options).
const (
	DefaultArchiveMaxCount = 10000
	DefaultArchiveMaxAge   = 90 * 24 * time.Hour
	DefaultCompletedMax    = 1000
	DefaultCompletedMaxAge = 7 * 24 * time.Hour
)

// Broker is a driver.Broker on Redis. It is safe for concurrent use.
type Broker struct {
	rdb goredis.UniversalClient
	// scripts runs the broker's scripts on rdb without go-redis's
	// retries (redisconn.NoRetry; see the package doc, Retries).
	scripts goredis.Scripter
	opts    Options
	closed  atomic.Bool
	// discovered: Queues has scanned for the queues of older versions.
	discovered atomic.Bool
	// keyCache holds the key names of up to maxCachedKeys queues
	// (queue → *keys), keysCached counts its stores.
	keyCache   sync.Map
	keysCached atomic.Int64
	// carriesStarts: Colocate answered non-nil, so publish names each
	// task in its message's ID for a carried fetch to start (messageID).
	carriesStarts atomic.Bool
	// listeners are ListenCancel's goroutines, ended by Close.
	listeners cancelListeners
}

var (
	_ driver.Broker        = (*Broker)(nil)
	_ driver.Limiter       = (*Broker)(nil)
	_ driver.Purger        = (*Broker)(nil)
	_ driver.StatsReporter = (*Broker)(nil)
	_ driver.Archiver      = (*Broker)(nil)
	_ driver.Lister        = (*Broker)(nil)
	_ driver.Finder        = (*Broker)(nil)
	_ driver.QueueLister   = (*Broker)(nil)
	_ driver.QueueKnower   = (*Broker)(nil)
	_ driver.Pauser        = (*Broker)(nil)
	_ driver.Heartbeater   = (*Broker)(nil)
)

// New returns a broker on rdb: a *redis.Client, *redis.ClusterClient or
// any UniversalClient (Sentinel included). opts may be nil.
func New(rdb goredis.UniversalClient, opts *Options) *Broker {
	b := &Broker{rdb: rdb, scripts: redisconn.NoRetry(rdb)}
	if opts != nil {
		b.opts = *opts
	}
	redisconn.UseLogger(b.opts.Logger)
	if b.opts.Prefix == "" {
		b.opts.Prefix = "errand"
	}
	if b.opts.CallTimeout == 0 {
		b.opts.CallTimeout = defaultCallTimeout
	}
	switch {
	case b.opts.MaxPayload == 0:
		b.opts.MaxPayload = DefaultMaxPayload
	case b.opts.MaxPayload < 0:
		b.opts.MaxPayload = -1
	}
	if b.opts.MaxBlock <= 0 {
		b.opts.MaxBlock = defaultMaxBlock
	}
	b.opts.ArchiveMaxCount = orDefault(b.opts.ArchiveMaxCount, DefaultArchiveMaxCount)
	b.opts.ArchiveMaxAge = orDefault(b.opts.ArchiveMaxAge, DefaultArchiveMaxAge)
	b.opts.CompletedMax = orDefault(b.opts.CompletedMax, DefaultCompletedMax)
	b.opts.CompletedMaxAge = orDefault(b.opts.CompletedMaxAge, DefaultCompletedMaxAge)
	return b
}

// The defaults of Options.CallTimeout and Options.MaxBlock.
const (
	defaultCallTimeout = 10 * time.Second
	defaultMaxBlock    = 250 * time.Millisecond
)

// orDefault is v, or def when v is zero, or zero (no bound, none) when v
// is negative.
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// keys are the keys of one queue (see scripts.go).
type keys struct {
	pending, delayed, inflight, msgs, tokens, count, notify string
	prio, ppending, pseq                                    string // priorities 1-255
	archive, archived, done, acked, seq                     string
	dead, reasons                                           string // older versions' dead letters
	ids, unlisted                                           string
	tx                                                      *txArgs // publish's transaction (publish.go)
}

// maxCachedKeys is how many queues' key names a broker keeps, built once
// (the queues a worker serves); the names of further queues (an operator
// browsing many) are built on each call.
const maxCachedKeys = 1024

func (b *Broker) keys(queue string) keys {
	if k, ok := b.keyCache.Load(queue); ok {
		return *k.(*keys)
	}
	k := b.makeKeys(queue)
	if b.keysCached.Add(1) <= maxCachedKeys {
		b.keyCache.Store(queue, &k)
	}
	return k
}

// keyRef is keys, shared: the cached keys of queue, not to be changed.
func (b *Broker) keyRef(queue string) *keys {
	if k, ok := b.keyCache.Load(queue); ok {
		return k.(*keys)
	}
	k := b.keys(queue)
	return &k
}

func (b *Broker) makeKeys(queue string) keys {
	k := "{" + b.opts.Prefix + ":" + queue + "}:"
	ks := keys{
		pending: k + "pending", delayed: k + "delayed", inflight: k + "inflight", msgs: k + "msgs",
		tokens: k + "tokens", count: k + "count", notify: k + "notify",
		archive: k + "archive", archived: k + "archived", done: k + "done", acked: k + "acked", seq: k + "seq",
		dead: k + "dead", reasons: k + "reasons",
		prio: k + "prio", ppending: k + "ppending", pseq: k + "pseq",
		ids: k + "ids", unlisted: k + "unlisted",
	}
	ks.tx = newTxArgs(&ks, b.global("queues"), queue)
	return ks
}

// global returns the key name of no single queue, under the hash tag
// {prefix} (see scripts.go).
func (b *Broker) global(name string) string { return "{" + b.opts.Prefix + "}:" + name }

// handle is what a Delivery carries back to Ack, Release, Extend, Reject.
type handle struct{ mid, token string }

// Limits reports the maximum payload (0 when Options.MaxPayload is
// negative: no limit) and MaxAckBatch; Redis has no maximum delay.
func (b *Broker) Limits() driver.Limits {
	return driver.Limits{MaxPayload: max(b.opts.MaxPayload, 0), MaxAckBatch: MaxAckBatch}
}

func (b *Broker) err(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, goredis.ErrClosed) || b.closed.Load():
		return fmt.Errorf("redis broker: %w", driver.ErrClosed)
	case ctx.Err() != nil:
		return ctx.Err()
	case deadlinePassed(ctx):
		// The socket's read deadline, which go-redis takes from ctx's
		// (ContextTimeoutEnabled), fired before ctx's own timer did.
		return context.DeadlineExceeded
	}
	return fmt.Errorf("redis broker: %w", err)
}

// deadlinePassed reports whether ctx has a deadline, and it has passed.
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

func randomID() string {
	var r [12]byte
	rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// evalFunc queues a script on a pipeline (see pipelined).
type evalFunc func(*goredis.Script, context.Context, goredis.Scripter, []string, ...any) *goredis.Cmd

// pipelined sends what fill queues on a pipeline, in one round trip (one
// per node on a cluster), and returns its commands. Scripts queued with
// eval go by SHA. Those a server refuses NOSCRIPT (it does not have them
// cached yet: fresh, restarted, or a cluster node that never ran them) are
// sent again, alone, with their source in a second pipeline, and their
// commands take the second answers: nothing else is sent twice, so a
// script that ran on one node is not run again because another node
// lacked it.
func (b *Broker) pipelined(ctx context.Context, fill func(goredis.Pipeliner, evalFunc)) ([]goredis.Cmder, error) {
	type call struct {
		cmd    *goredis.Cmd
		script *goredis.Script
		keys   []string
		args   []any
	}
	var calls []call
	pipe := b.rdb.Pipeline()
	fill(pipe, func(s *goredis.Script, ctx context.Context, c goredis.Scripter, keys []string, args ...any) *goredis.Cmd {
		if p, ok := c.(redisconn.Processor); ok {
			c = redisconn.NoRetry(p)
		}
		cmd := s.EvalSha(ctx, c, keys, args...)
		calls = append(calls, call{cmd, s, keys, args})
		return cmd
	})
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return cmds, nil
	}
	again := b.rdb.Pipeline()
	type redo struct{ orig, eval *goredis.Cmd }
	var redos []redo
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			redos = append(redos, redo{c.cmd, c.script.Eval(ctx, redisconn.NoRetry(again), c.keys, c.args...)})
		}
	}
	if len(redos) == 0 {
		return cmds, err
	}
	if _, err := again.Exec(ctx); err != nil {
		// go-redis does not stamp every failure on the commands (an error
		// while it connects): a redo with neither reply nor error failed.
		for _, r := range redos {
			if r.eval.Err() == nil && r.eval.Val() == nil {
				r.eval.SetErr(err)
			}
		}
	}
	for _, r := range redos {
		r.orig.SetVal(r.eval.Val())
		r.orig.SetErr(r.eval.Err())
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return cmds, err
		}
	}
	return cmds, nil
}

// dueMillis is nb in ms, rounded up (never early); 0 for the zero time.
func dueMillis(nb time.Time) int64 {
	if nb.IsZero() {
		return 0
	}
	due := nb.UnixMilli()
	if nb.Sub(time.UnixMilli(due)) > 0 {
		due++
	}
	return due
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// Fetch runs the fetch script (promote due delayed messages and expired
// leases, then lease up to limit, highest Message.Priority first); when
// nothing is due it blocks on the queue's wake-up list until a publish (of
// any priority), the next due time, or MaxBlock, and the fetch script runs
// again, queued behind the wait in the same round trip (waitFetch).
func (b *Broker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	ds, _, _, err := b.fetch(ctx, queue, limit, lease, noStarts)
	return ds, err
}

// noStarts are fetchScript's last ARGV for a fetch that starts nothing.
var noStarts = []any{"", 0}

// fetch is Fetch, the fetch script given starts as its ARGV from the 8th
// on (noStarts, or a carried fetch's: carry.go). It also returns each
// delivery's start (nil: not tried) and the server's time of the lease.
//
// A fetch that answers 'wait' is followed by one pipeline: BLPOP on the
// queue's wake-up list, then the fetch script again (waitFetch). Redis
// runs a connection's pipelined commands in order, so the script runs the
// moment the wait ends, and its reply is the handover: a message
// published to an idle fetcher reaches it in the wake-up's round trip,
// not one more. The deliveries of a fetch that ran are returned even when
// ctx ended meanwhile (go-redis does not interrupt a read on
// cancellation, only at a deadline): the caller holds them, as it holds
// those of a fetch script that was running when ctx was cancelled.
func (b *Broker) fetch(ctx context.Context, queue string, limit int, lease time.Duration, starts []any) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	k := b.keys(queue)
	keys := k.fetchKeys()
	args := func() []any {
		return append([]any{limit, lease.Milliseconds(), promoteBatch, randomID(),
			max(b.opts.MaxPayload, 0), b.opts.ArchiveMaxCount, b.opts.ArchiveMaxAge.Milliseconds()}, starts...)
	}
	var res []any
	waited := false // res is the answer of the fetch queued behind a wait
	for {
		if !waited {
			if b.closed.Load() {
				return nil, nil, time.Time{}, fmt.Errorf("redis broker: %w", driver.ErrClosed)
			}
			if err := ctx.Err(); err != nil {
				return nil, nil, time.Time{}, err
			}
			sctx, cancel := b.bound(ctx)
			var err error
			res, err = b.runFetch(sctx, &k, keys, args(), nil)
			cancel()
			if err != nil {
				return nil, nil, time.Time{}, b.err(ctx, err)
			}
		}
		if len(res) > 0 && res[0] != "wait" {
			return deliveries(queue, res)
		}
		if b.closed.Load() {
			return nil, nil, time.Time{}, fmt.Errorf("redis broker: %w", driver.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, time.Time{}, err
		}
		// Redis checks blocking timeouts only hz times a second (every
		// 100ms by default), so a due time nearer than MaxBlock is not left
		// to the BLPOP timeout: a local timer pushes a wake-up token at that
		// moment, which wakes a blocked fetcher at once.
		var waker *time.Timer
		if len(res) == 3 {
			next, _ := res[1].(int64)
			now, _ := res[2].(int64)
			if until := time.Duration(next-now) * time.Millisecond; next >= 0 && until < b.opts.MaxBlock {
				if until <= 0 {
					waited = false
					continue
				}
				waker = time.AfterFunc(until, func() { b.wake(k.notify) })
			}
		}
		var err error
		res, err = b.waitFetch(ctx, &k, keys, args())
		if waker != nil {
			waker.Stop()
		}
		if err != nil {
			return nil, nil, time.Time{}, b.err(ctx, err)
		}
		waited = true
	}
}

// runFetch runs the fetch script of k's queue with keys and args after
// the commands before queues (nil: none), in one pipeline, and returns
// the script's answer. The pipeline also adds the queue to P:queues,
// every time (an SADD
// of a member already there costs Redis O(1)): the set heals within one
// fetch of any worker whatever emptied it (a Redis restarted without
// persistence, a FLUSHDB, a failover), and a queue fed only by an older
// version's producers or another program is listed once a worker reads
// it. A failure of that SADD alone is not reported (Publish lists the
// queue too). On a cluster the set and the queue's keys hash to
// different slots: go-redis sends the two nodes' commands at once, one
// round trip.
func (b *Broker) runFetch(ctx context.Context, k *keys, keys []string, args []any, before func(goredis.Pipeliner)) ([]any, error) {
	var fetch *goredis.Cmd
	_, err := b.pipelined(ctx, func(pipe goredis.Pipeliner, eval evalFunc) {
		if before != nil {
			before(pipe)
		}
		_ = pipe.Process(ctx, goredis.NewIntCmd(ctx, k.tx.list...))
		fetch = eval(fetchScript, ctx, pipe, keys, args...)
	})
	// err may be another command's (the BLPOP's redis.Nil when it timed
	// out, the SADD's): the script's own reply decides. A script with
	// neither reply nor error was not run or not read (go-redis does not
	// stamp every failure on the commands).
	if fetch.Err() == nil && fetch.Val() == nil {
		if err == nil || err == goredis.Nil {
			err = errors.New("fetch script: no reply")
		}
		return nil, err
	}
	v, err := fetch.Slice()
	if err != nil {
		return nil, redisconn.PermErr(fetch, err) // an ACL refusal names the script's keys
	}
	return v, nil
}

// waitFetch blocks on k's K:notify (BLPOP) for up to MaxBlock (less when
// ctx's deadline is nearer) and then runs the fetch script with keys and args
// (runFetch), both in one pipeline, and returns the script's answer. Pipelined, the
// script runs as soon as the wait ends (woken by a publish or a waker's
// token, or timed out), with no round trip between the two. A server that has not cached the script refuses
// it NOSCRIPT after the wait, and pipelined sends it again alone, with its
// source.
//
// go-redis reads a pipeline's replies under the client's ReadTimeout (3s
// by default), as it reads a BLPOP sent by Do: MaxBlock must stay below
// it, as before. The read is also bounded by ctx's deadline and by
// MaxBlock plus blockMargin, so that on a client honouring ctx deadlines
// (ContextTimeoutEnabled, as Open sets) a server that stopped answering
// cannot hold Fetch past its caller's shutdown. A read that ends that way
// drops the connection, and Redis frees the blocked client with the
// queued script unrun: nothing is leased. In the narrow race where the
// wait ended and the script ran just as the read gave up, its leases are
// abandoned with the reply: they run out and the messages are delivered
// again (after their lease, never lost), as when the reply of any fetch
// script is lost.
func (b *Broker) waitFetch(ctx context.Context, k *keys, keys []string, args []any) ([]any, error) {
	// The wait ends by ctx's deadline too, so the script runs then, not up
	// to MaxBlock later for a caller who has gone (a client that does not
	// honour ctx deadlines reads on; one that does gives up at the
	// deadline, as below). A block of 0 would wait for ever: 1ms at least.
	block := b.opts.MaxBlock
	if d, ok := ctx.Deadline(); ok {
		block = min(block, time.Until(d))
	}
	secs := strconv.FormatFloat(max(block, time.Millisecond).Seconds(), 'f', 3, 64)
	bctx, cancel := context.WithTimeout(ctx, b.opts.MaxBlock+blockMargin)
	defer cancel()
	return b.runFetch(bctx, k, keys, args, func(pipe goredis.Pipeliner) {
		pipe.Do(bctx, "BLPOP", k.notify, secs)
	})
}

// blockMargin is how long past MaxBlock a blocked fetch waits for Redis's
// reply before giving up on the server.
const blockMargin = 2 * time.Second

// wake pushes one wake-up token to a queue's notify list.
func (b *Broker) wake(notify string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.MaxBlock)
	defer cancel()
	pipe := b.rdb.Pipeline()
	pipe.LPush(ctx, notify, "1")
	pipe.LTrim(ctx, notify, 0, wakeKeep-1)
	pipe.Exec(ctx) // best effort: a lost token only means waking at MaxBlock
}

// fetched is one delivery of a fetch's reply, with its start and the
// state before it.
type fetched struct {
	d     driver.Delivery
	start driver.StartResult
	prev  driver.TaskState
}

func deliveries(queue string, res []any) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	out := make([]*driver.Delivery, 0, len(res)/fetchReply)
	var starts []*driver.StartResult
	for i := 0; i+fetchReply <= len(res); i += fetchReply {
		mid, _ := res[i].(string)
		env, _ := res[i+1].(string)
		tok, _ := res[i+2].(string)
		n, _ := res[i+3].(int64)
		p, _ := res[i+4].(int64)
		began, _ := res[i+5].(int64)
		id, body, ok := strings.Cut(env, "\n")
		if !ok {
			body = env // not written by this broker: surface it as is
		}
		f := new(fetched) // the delivery, its start and its previous state in one allocation
		d := &f.d
		*d = driver.Delivery{
			Message: driver.Message{ID: id, Queue: queue, Body: []byte(body), Priority: clampPriority(p)},
			Attempt: int(n),
			Handle:  handle{mid: mid, token: tok},
		}
		var st *driver.StartResult
		if began != notTried {
			as, _ := res[i+7].(string)
			a, name, _ := strings.Cut(as, "\n")
			d.Task = name
			d.TaskAttempt, _ = strconv.Atoi(a)
			st = &f.start
			st.Written = began == startWritten
			if raw, ok := res[i+6].(string); ok {
				st.Prev = &f.prev
				if err := statejson.Unmarshal(raw, st.Prev); err != nil {
					st.Prev, st.Err = nil, fmt.Errorf("redis broker: task %s: decode the state before its start: %w", id, err)
				}
			}
			if starts == nil {
				starts = make([]*driver.StartResult, len(out), len(res)/fetchReply)
			}
		}
		if starts != nil {
			starts = append(starts, st)
		}
		out = append(out, d)
	}
	if starts != nil {
		starts = append(starts, make([]*driver.StartResult, len(out)-len(starts))...)
	}
	var at time.Time
	if len(res)%fetchReply == 1 {
		us, _ := res[len(res)-1].(int64)
		at = time.UnixMicro(us).UTC()
	}
	return out, starts, at, nil
}

// clampPriority is a priority read from Redis as a driver.Message's.
func clampPriority[T int | int64](p T) uint8 { return uint8(min(max(p, 0), math.MaxUint8)) }

func (b *Broker) settle(ctx context.Context, d *driver.Delivery, script *goredis.Script, keys []string, args ...any) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	h, ok := d.Handle.(handle)
	if !ok {
		return fmt.Errorf("redis broker: delivery %q was not fetched from this broker", d.ID)
	}
	n, err := honourCancel(ctx, func() (int, error) {
		return script.Run(ctx, b.scripts, keys, append([]any{h.mid, h.token}, args...)...).Int()
	})
	if err != nil {
		return b.err(ctx, err)
	}
	if n == leaseLost {
		return fmt.Errorf("redis broker: message %q: %w", d.ID, driver.ErrLeaseLost)
	}
	return nil
}

// MaxAckBatch is the most deliveries one Ack call takes
// (Limits().MaxAckBatch): the ack script runs them all in one step, which
// holds the Redis server that long.
const MaxAckBatch = 128

// Ack deletes the delivered messages and, in the same script, keeps each
// among its queue's recently completed (Options.CompletedMax) and counts
// the ack (Stats.Completed): every delivery of one queue in one script run
// (one round trip; on a cluster a queue's keys share one slot). It returns
// one error per delivery: ErrLeaseLost where its lease ran out. Deliveries
// of several queues (errand never mixes them) take one run per queue. It
// may be called concurrently.
func (b *Broker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	errs := make([]error, len(ds))
	byQueue := map[string][]int{}
	var order []string
	for i, d := range ds {
		if _, ok := d.Handle.(handle); !ok {
			errs[i] = fmt.Errorf("redis broker: delivery %q was not fetched from this broker", d.ID)
			continue
		}
		if _, ok := byQueue[d.Queue]; !ok {
			order = append(order, d.Queue)
		}
		byQueue[d.Queue] = append(byQueue[d.Queue], i)
	}
	for _, q := range order {
		idx := byQueue[q]
		k := b.keys(q)
		args := make([]any, 0, 1+2*len(idx))
		args = append(args, b.opts.CompletedMax)
		for _, i := range idx {
			h := ds[i].Handle.(handle)
			args = append(args, h.mid, h.token)
		}
		acked, err := honourCancel(ctx, func() ([]int64, error) {
			return ackScript.Run(ctx, b.scripts, k.ackKeys(), args...).Int64Slice()
		})
		if err == nil && len(acked) != len(idx) {
			err = fmt.Errorf("redis broker: ack script answered %d results for %d deliveries", len(acked), len(idx))
		}
		for j, i := range idx {
			switch {
			case err != nil:
				errs[i] = b.err(ctx, err)
			case acked[j] == leaseLost:
				errs[i] = fmt.Errorf("redis broker: message %q: %w", ds[i].ID, driver.ErrLeaseLost)
			}
		}
	}
	return errs
}

// Release requeues the delivered message, due at notBefore.
func (b *Broker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	k := b.keys(d.Queue)
	var nb int64
	if !notBefore.IsZero() {
		nb = notBefore.UnixMilli() + 1
	}
	return b.settle(ctx, d, releaseScript, k.releaseKeys(), nb)
}

// Extend renews the delivery's lease.
func (b *Broker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	k := b.keys(d.Queue)
	return b.settle(ctx, d, extendScript, k.extendKeys(), lease.Milliseconds())
}

// Reject archives the delivered message (see Archive) with reason as both
// its Reason and Error, bounded by Options.ArchiveMaxCount and
// ArchiveMaxAge.
func (b *Broker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	e := driver.ArchiveEntry{Message: d.Message, Reason: reason, Error: reason, Attempts: d.Attempt, At: time.Now()}
	return b.Archive(ctx, d, e, driver.Retention{MaxCount: b.opts.ArchiveMaxCount, MaxAge: b.opts.ArchiveMaxAge})
}

// Close makes every later call return driver.ErrClosed; blocked fetches
// return within MaxBlock. It ends the cancel listeners (ListenCancel)
// and waits for their goroutines. It closes the client only if
// Options.CloseClient.
func (b *Broker) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.listeners.close()
	if !b.opts.CloseClient {
		return nil
	}
	return b.rdb.Close()
}

// pendingPage returns the due messages of queue from start to stop
// (inclusive; -1: to the end) in delivery order, with their priorities.
func (b *Broker) pendingPage(ctx context.Context, queue string, start, stop int) ([]driver.Listed, error) {
	k := b.keys(queue)
	envs, err := pendingScript.Run(ctx, b.scripts, k.pendingKeys(), start, stop).StringSlice()
	if err != nil {
		return nil, b.err(ctx, err)
	}
	out := make([]driver.Listed, 0, len(envs)/2)
	for i := 0; i+1 < len(envs); i += 2 {
		id, body, _ := strings.Cut(envs[i], "\n")
		p, _ := strconv.Atoi(envs[i+1])
		out = append(out, driver.Listed{Message: driver.Message{ID: id, Queue: queue, Body: []byte(body), Priority: clampPriority(p)}})
	}
	return out, nil
}

// Purge drops the pending and delayed messages of queue.
func (b *Broker) Purge(ctx context.Context, queue string) (int, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	k := b.keys(queue)
	n, err := purgeScript.Run(ctx, b.scripts, k.purgeKeys()).Int()
	return n, b.err(ctx, err)
}

// Stats counts queue in one pipeline: Dead is the size of its archive,
// Completed its count of acks.
func (b *Broker) Stats(ctx context.Context, queue string) (driver.QueueStats, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if err := b.migrate(ctx, queue); err != nil {
		return driver.QueueStats{}, err
	}
	k := b.keys(queue)
	pipe := b.rdb.Pipeline()
	p, d, f, x := pipe.LLen(ctx, k.pending), pipe.ZCard(ctx, k.delayed), pipe.ZCard(ctx, k.inflight), pipe.ZCard(ctx, k.archive)
	pp := pipe.ZCard(ctx, k.ppending)
	c := pipe.Get(ctx, k.acked)
	if _, err := pipe.Exec(ctx); err != nil && err != goredis.Nil {
		return driver.QueueStats{}, b.err(ctx, err)
	}
	done, err := c.Int64()
	if err != nil && err != goredis.Nil {
		return driver.QueueStats{}, b.err(ctx, err)
	}
	return driver.QueueStats{Pending: int(p.Val() + pp.Val()), Delayed: int(d.Val()), InFlight: int(f.Val()), Dead: int(x.Val()), Completed: done}, nil
}

// bound returns ctx limited to CallTimeout (see Options.CallTimeout).
//
// A ctx whose own deadline comes first (errand bounds each step of a
// task by its own CallTimeout) is returned as it is: a second timer
// could only fire later.
func (b *Broker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.opts.CallTimeout < 0 {
		return ctx, noCancel
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.opts.CallTimeout {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

func noCancel() {}

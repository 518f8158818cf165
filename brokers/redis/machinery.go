package redisbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/machinerywire"
	"github.com/errand-go/errand/internal/redisconn"
)

// machinery v2's Redis broker keys (brokers/redis/goredis.go): a queue is a
// list named after it, holding each task's Signature JSON (RPUSH, BLPOP);
// every delayed task of every queue waits in one sorted set scored by its
// ETA in Unix nanoseconds, and is pushed onto its RoutingKey's list when due.
const (
	// MachineryDefaultQueue is machinery's default queue (config.Config
	// DefaultQueue in its examples and env var defaults).
	MachineryDefaultQueue = "machinery_tasks"
	// MachineryDelayedTasksKey is machinery's default delayed-task sorted
	// set (config.RedisConfig.DelayedTasksKey).
	MachineryDelayedTasksKey = "delayed_tasks"
)

// MachineryOptions configures a [MachineryBroker].
type MachineryOptions struct {
	// DefaultQueue is where a delayed task that names no RoutingKey goes
	// when due (machinery's config DefaultQueue). Default:
	// MachineryDefaultQueue.
	DefaultQueue string
	// DelayedTasksKey is machinery's sorted set of delayed tasks (its
	// config redis.delayed_tasks_key). Default: MachineryDelayedTasksKey.
	DelayedTasksKey string
	// Prefix starts the keys errand keeps beside machinery's (leases,
	// leased bodies, set-aside messages). Default: "errand-machinery".
	Prefix string
	// MaxBlock bounds one wait of an idle Fetch. Fetch waits on
	// machinery's list itself (BLMOVE, as machinery's workers wait with
	// BLPOP), so a task pushed there is taken the moment it arrives,
	// whatever MaxBlock is. Between two waits Fetch puts back expired
	// leases and moves due delayed tasks onto their lists: a delayed task
	// already in the set when a wait began is moved at its due time, one
	// added during a wait when the wait ends, within MaxBlock. A
	// cancelled ctx or a Close is noticed within MaxBlock too. errandconfig
	// sets it from machinery's normal_tasks_poll_period (its BLPOP
	// timeout) and delayed_tasks_poll_period, the smaller of the two.
	// The client's ReadTimeout bounds the wait's reply, so a wait is
	// kept below it (ReadTimeout less half of it, at most 1s less). On a
	// server without BLMOVE (Redis before 6.2) an idle Fetch looks again
	// every 100ms instead (MaxBlock if shorter). Default: 250ms.
	MaxBlock time.Duration
	// DeadMax bounds each queue's list of set-aside messages (Reject).
	// Default: DefaultArchiveMaxCount.
	DeadMax int
	// CloseClient: Close also closes the client. Default: false.
	CloseClient bool
}

// MachineryBroker is a [driver.Broker] on machinery v2's own Redis queues,
// for migrating from machinery without a flag day: errand workers take the
// tasks machinery producers send, and what errand publishes (retries,
// callbacks, chord callbacks, new tasks) goes onto machinery's lists and
// delayed set in machinery's JSON, where machinery workers can take it too.
// See docs/migrating-from-machinery.md.
//
// Fetch moves a task from machinery's list into a lease held by errand in
// one script: from that moment errand's guarantees hold (a worker that
// dies leaves a lease that runs out, and the next Fetch puts the task back
// at the head of machinery's list). An idle Fetch waits on machinery's
// list with BLMOVE, which moves the task that wakes it into the queue's
// hand-over list ({Prefix:queue}:moving), with the fetch script queued
// behind it on the same connection: Redis runs the script the moment the
// wait ends, and every fetch script leases what the hand-over list holds
// before it takes from machinery's list, so a task never waits there
// longer than until the next fetch of its queue. A task a machinery
// worker popped (BLPOP) is outside these guarantees: if that worker dies,
// machinery loses it.
//
// Single node and Sentinel only: machinery's keys carry no hash tags.
type MachineryBroker struct {
	rdb     goredis.UniversalClient
	scr     goredis.Scripter
	opts    MachineryOptions
	closed  chan struct{}
	closeMu sync.Once
	// polls: the server has no BLMOVE (Redis before 6.2, or the command
	// renamed away), so an idle Fetch looks again every
	// min(MaxBlock, machineryPoll) instead of waiting on the list.
	polls atomic.Bool
}

// machineryPoll is how often an idle Fetch looks at a queue on a server
// without BLMOVE.
const machineryPoll = 100 * time.Millisecond

var _ driver.Broker = (*MachineryBroker)(nil)

// NewMachinery returns a broker on machinery's queues in rdb's database.
func NewMachinery(rdb goredis.UniversalClient, opts *MachineryOptions) *MachineryBroker {
	var o MachineryOptions
	if opts != nil {
		o = *opts
	}
	if o.DefaultQueue == "" {
		o.DefaultQueue = MachineryDefaultQueue
	}
	if o.DelayedTasksKey == "" {
		o.DelayedTasksKey = MachineryDelayedTasksKey
	}
	if o.Prefix == "" {
		o.Prefix = "errand-machinery"
	}
	if o.MaxBlock <= 0 {
		o.MaxBlock = 250 * time.Millisecond
	}
	o.MaxBlock = min(o.MaxBlock, blockCap(rdb))
	if o.DeadMax <= 0 {
		o.DeadMax = DefaultArchiveMaxCount
	}
	redisconn.Quiet()
	return &MachineryBroker{rdb: rdb, scr: redisconn.NoRetry(rdb), opts: o, closed: make(chan struct{})}
}

// mKeys are the keys of one queue: machinery's list (named after the
// queue), then errand's beside it under the hash tag {Prefix:queue}: the
// lease set (token -> deadline in ms), the leased bodies (token -> body,
// and token..':n' -> its delivery count), the token counter, the set-aside
// list, the start of each task's given-back key (count + UUID: the
// deliveries of a body errand put back onto the list or into the delayed
// set, read by the fetch that takes it again), and the hand-over list a
// waiting fetch's BLMOVE moves a task into. delayed is machinery's delayed
// set, fallback its default queue's list.
type mKeys struct{ list, leases, bodies, seq, dead, count, moving, delayed, fallback string }

func (b *MachineryBroker) keys(queue string) mKeys {
	k := "{" + b.opts.Prefix + ":" + queue + "}"
	return mKeys{list: queue, leases: k + ":leases", bodies: k + ":bodies", seq: k + ":seq", dead: k + ":dead", count: k + ":n:",
		moving: k + ":moving", delayed: b.opts.DelayedTasksKey, fallback: b.opts.DefaultQueue}
}

// The scripts' key lists, in their prologues' order (see scripts.go, "How
// a script reads"; TestScriptPrologues checks them).
func (k mKeys) fetchKeys() []string   { return []string{k.list, k.leases, k.bodies, k.seq, k.moving} }
func (k mKeys) dueKeys() []string     { return []string{k.delayed} }
func (k mKeys) promoteKeys() []string { return []string{k.delayed, k.list, k.fallback} }
func (k mKeys) settleKeys() []string  { return []string{k.leases, k.bodies} }
func (k mKeys) releaseKeys() []string { return []string{k.leases, k.bodies, k.list, k.delayed} }
func (k mKeys) extendKeys() []string  { return []string{k.leases} }
func (k mKeys) rejectKeys() []string  { return []string{k.leases, k.bodies, k.dead} }

// luaNowNs sets nowns, the server's clock in ns as a decimal string (after
// luaNow's t).
const luaNowNs = `
local nowns = t[1] .. string.format('%06d', tonumber(t[2])) .. '000'
`

// luaCountKey defines countkey(prefix, body): the key of the delivery
// count of the task a body names (prefix .. UUID, or the ID of a body
// machinerywire wrapped), nil for a body without one.
const luaCountKey = `
local function countkey(prefix, body)
  local ok, s = pcall(cjson.decode, body)
  if not ok or type(s) ~= 'table' then return nil end
  if type(s.UUID) == 'string' then return prefix .. s.UUID end
  if type(s.ErrandOpaque) == 'table' and type(s.ErrandOpaque.ID) == 'string' then return prefix .. s.ErrandOpaque.ID end
  return nil
end
`

// mFetch puts back expired leases at the head of machinery's list (each
// with its delivery count in its given-back key, kept count_ttl), then
// moves up to limit tasks into leases, first those of the hand-over list
// (moved there by a waiting fetch's BLMOVE from the list's head), then
// from machinery's list: a task errand gave back is delivery count+1 (its
// given-back key taken), any other body delivery 1, so a second copy of a
// running task reads as a first delivery, not a redelivery: {token1,
// body1, count1, token2, ...}.
var mFetch = newScript(`
-- mfetch
-- KEYS[1] -> q
-- KEYS[2] -> K:leases
-- KEYS[3] -> K:bodies
-- KEYS[4] -> K:seq
-- KEYS[5] -> K:moving
-- ARGV[1] -> count key prefix, ARGV[2] -> limit, ARGV[3] -> lease (ms),
-- ARGV[4] -> count TTL (ms)
local list, leases, bodies, seq, moving = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local countprefix, limit, lease, countttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
`, luaNow, luaCountKey, `
local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 100)
for i = #expired, 1, -1 do
  local tok = expired[i]
  local body = redis.call('HGET', bodies, tok)
  if body then
    redis.call('LPUSH', list, body)
    local ck = countkey(countprefix, body)
    local n = redis.call('HGET', bodies, tok .. ':n')
    if ck and n then redis.call('SET', ck, n, 'PX', countttl) end
  end
  redis.call('ZREM', leases, tok)
  redis.call('HDEL', bodies, tok, tok .. ':n')
end
local out = {}
for i = 1, limit do
  local body = redis.call('LPOP', moving) or redis.call('LPOP', list)
  if not body then break end
  local tok = tostring(redis.call('INCR', seq))
  local n = 1
  local ck = countkey(countprefix, body)
  if ck then
    local given = redis.call('GET', ck)
    if given then
      n = (tonumber(given) or 0) + 1
      redis.call('DEL', ck)
    end
  end
  redis.call('ZADD', leases, now + lease, tok)
  redis.call('HSET', bodies, tok, body, tok .. ':n', n)
  out[#out + 1] = tok
  out[#out + 1] = body
  out[#out + 1] = tostring(n)
end
return out
`)

// machineryCountTTL is how long the delivery count of a task errand gave
// back waits for errand's next fetch of it (a machinery worker may take
// the task instead).
const machineryCountTTL = 7 * 24 * time.Hour

// mDue lists the due members of machinery's delayed set, past the first
// skip (tasks promote could not move), after the server's clock and the
// due time of the first member not yet due (empty if none), both in Unix ns:
// {now, next, member1, member2, ...}.
var mDue = newScript(`
-- mdue
-- KEYS[1] -> delayed_tasks
-- ARGV[1] -> most to list, ARGV[2] -> how many due ones to skip
local delayed = KEYS[1]
local most, skip = tonumber(ARGV[1]), tonumber(ARGV[2])
`, luaNow, luaNowNs, `
local out = redis.call('ZRANGEBYSCORE', delayed, '-inf', nowns, 'LIMIT', skip, most)
local nxt = redis.call('ZRANGEBYSCORE', delayed, '(' .. nowns, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
table.insert(out, 1, nxt[2] or '')
table.insert(out, 1, nowns)
return out
`)

// mPromote moves one due task from the delayed set onto its list, once.
// A RoutingKey that names a key of another type than a list (machinery's
// RPUSH would fail on it) sends the task to the default queue instead;
// when that is no list either the task stays in the delayed set. The
// types are checked before the task leaves the set, so a WRONGTYPE can
// never lose it: 1 moved to its list, 2 moved to the default queue, 0
// already gone (someone else promoted it), -1 left in the set.
var mPromote = newScript(`
-- mpromote
-- KEYS[1] -> delayed_tasks
-- KEYS[2] -> q
-- KEYS[3] -> machinery_tasks
-- ARGV[1] -> the member
local delayed, list, fallback = KEYS[1], KEYS[2], KEYS[3]
local member = ARGV[1]
local function islist(k)
  local t = redis.call('TYPE', k)
  if type(t) == 'table' then t = t.ok end
  return t == 'list' or t == 'none'
end
if not redis.call('ZSCORE', delayed, member) then return 0 end
local to, moved = list, 1
if not islist(list) then
  if not islist(fallback) then return -1 end
  to, moved = fallback, 2
end
redis.call('ZREM', delayed, member)
redis.call('RPUSH', to, member)
return moved
`)

// mSettle ends leases: 1 for each token still leased (its body and
// delivery count removed), 0 for a lost one.
var mSettle = newScript(`
-- msettle
-- KEYS[1] -> K:leases
-- KEYS[2] -> K:bodies
-- ARGV[1..] -> tokens
local leases, bodies = KEYS[1], KEYS[2]
local out = {}
for i = 1, #ARGV do
  local tok = ARGV[i]
  if redis.call('ZREM', leases, tok) == 1 then
    redis.call('HDEL', bodies, tok, tok .. ':n')
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// mRelease ends a lease and gives the task back: onto the head of the list
// (no due time) or into the delayed set at its due time, with its delivery
// count in its given-back key (kept count_ttl) for the fetch that takes it
// again.
var mRelease = newScript(`
-- mrelease
-- KEYS[1] -> K:leases
-- KEYS[2] -> K:bodies
-- KEYS[3] -> q
-- KEYS[4] -> delayed_tasks
-- ARGV[1] -> token, ARGV[2] -> due time in ns or '', ARGV[3] -> count key
-- prefix, ARGV[4] -> count TTL (ms)
local leases, bodies, list, delayed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tok, due, countprefix, countttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
`, luaCountKey, `
local body = redis.call('HGET', bodies, tok)
if redis.call('ZREM', leases, tok) == 0 or not body then return 0 end
local n = redis.call('HGET', bodies, tok .. ':n')
redis.call('HDEL', bodies, tok, tok .. ':n')
local ck = countkey(countprefix, body)
if ck and n then redis.call('SET', ck, n, 'PX', countttl) end
if due == '' then
  redis.call('LPUSH', list, body)
else
  redis.call('ZADD', delayed, due, body)
end
return 1
`)

// mExtend renews a lease still held.
var mExtend = newScript(`
-- mextend
-- KEYS[1] -> K:leases
-- ARGV[1] -> token, ARGV[2] -> lease (ms)
local leases = KEYS[1]
local tok, lease = ARGV[1], tonumber(ARGV[2])
`, luaNow, `
if not redis.call('ZSCORE', leases, tok) then return 0 end
redis.call('ZADD', leases, 'XX', now + lease, tok)
return 1
`)

// mReject ends a lease and keeps the task in the queue's set-aside list.
var mReject = newScript(`
-- mreject
-- KEYS[1] -> K:leases
-- KEYS[2] -> K:bodies
-- KEYS[3] -> K:dead
-- ARGV[1] -> token, ARGV[2] -> reason, ARGV[3] -> most kept
local leases, bodies, dead = KEYS[1], KEYS[2], KEYS[3]
local tok, reason, most = ARGV[1], ARGV[2], tonumber(ARGV[3])
`, luaNow, `
local body = redis.call('HGET', bodies, tok)
if redis.call('ZREM', leases, tok) == 0 or not body then return 0 end
redis.call('HDEL', bodies, tok, tok .. ':n')
redis.call('LPUSH', dead, cjson.encode({body = body, reason = reason, at = now}))
redis.call('LTRIM', dead, 0, most - 1)
return 1
`)

// Publish pushes each message onto machinery's list for its queue, or, if
// it is due later, into machinery's delayed set scored by its due time in
// Unix nanoseconds, in machinery's JSON.
func (b *MachineryBroker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	pipe := b.rdb.Pipeline()
	now := time.Now()
	for _, m := range msgs {
		body, err := machinerywire.MachineryBody(m.ID, m.Body, m.Queue)
		if err != nil {
			return fmt.Errorf("redis machinery broker: message %q: %w", m.ID, err)
		}
		if m.NotBefore.After(now) {
			pipe.ZAdd(ctx, b.opts.DelayedTasksKey, goredis.Z{Score: float64(m.NotBefore.UnixNano()), Member: body})
		} else {
			pipe.RPush(ctx, m.Queue, body)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis machinery broker: publish: %w", err)
	}
	return nil
}

// Fetch moves due delayed tasks onto their lists, then leases up to limit
// tasks of queue. While there are none it waits on machinery's list (up to
// MaxBlock at a time, see waitFetch), and takes a task the moment one is
// pushed there, as machinery's BLPOP does.
func (b *MachineryBroker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	k := b.keys(queue)
	args := []any{k.count, max(limit, 1), lease.Milliseconds(), machineryCountTTL.Milliseconds()}
	waited := false // the last wait's fetch script found nothing: wait again
	for {
		if err := b.isClosed(); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		due, err := b.promote(ctx)
		if err != nil {
			return nil, err
		}
		if !waited {
			res, err := mFetch.Run(ctx, b.scr, k.fetchKeys(), args...).StringSlice()
			if err != nil {
				return nil, fmt.Errorf("redis machinery broker: fetch %q: %w", queue, err)
			}
			if len(res) > 0 {
				return machineryDeliveries(queue, res), nil
			}
		}
		if b.polls.Load() {
			if err := b.sleep(ctx, min(b.opts.MaxBlock, machineryPoll)); err != nil {
				return nil, err
			}
			waited = false
			continue
		}
		res, err := b.waitFetch(ctx, k, args, due)
		if err != nil {
			if cerr := b.isClosed(); cerr != nil {
				return nil, cerr // closed (and its client with it) while it waited
			}
			return nil, fmt.Errorf("redis machinery broker: fetch %q: %w", queue, err)
		}
		// The deliveries of a fetch script that ran are returned even when
		// ctx ended during the wait: the caller holds them.
		if len(res) > 0 {
			return machineryDeliveries(queue, res), nil
		}
		waited = true
	}
}

func machineryDeliveries(queue string, res []string) []*driver.Delivery {
	out := make([]*driver.Delivery, 0, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		id, body := machinerywire.ErrandMessage([]byte(res[i+1]))
		if id == "" {
			id = queue + ":" + res[i]
		}
		n, _ := strconv.Atoi(res[i+2])
		out = append(out, &driver.Delivery{
			Message: driver.Message{ID: id, Queue: queue, Body: body},
			Attempt: n,
			Handle:  res[i],
		})
	}
	return out
}

// waitFetch waits on machinery's list for up to MaxBlock (less when ctx's
// deadline is nearer), with BLMOVE from its head into the hand-over list,
// and runs the fetch script with args as soon as the wait ends, both in
// one pipeline: Redis runs a connection's commands in order, so the task
// that ended the wait is leased the moment it arrived, in the wait's round
// trip. A task pushed onto the list wakes the first waiter, errand's or
// machinery's, as Redis serves blocked clients in the order they blocked.
//
// When the wait ends with the task moved and the script is not run (the
// connection dropped between the two, a server that lost its script cache
// answering NOSCRIPT, a crash), the task waits in the hand-over list,
// where the next fetch script of the queue (this one's NOSCRIPT retry, or
// any worker's next fetch) leases it first: at least once, as for a lease
// that ran out. A reply read past the wait's bound (MaxBlock plus
// blockMargin, or ctx's deadline) drops the connection; a script that ran
// just then leased tasks whose reply is lost, and they are delivered again
// when their leases run out, as for any fetch reply lost.
//
// due is when the first delayed task not yet due will be (negative: none
// known): when it falls within the wait, a timer moves it onto its list at
// that moment (a push that wakes the wait when it is this queue's).
func (b *MachineryBroker) waitFetch(ctx context.Context, k mKeys, args []any, due time.Duration) ([]string, error) {
	block := b.opts.MaxBlock
	if d, ok := ctx.Deadline(); ok {
		block = min(block, time.Until(d))
	}
	if due >= 0 && due < block {
		defer b.promoteAfter(due)()
	}
	secs := strconv.FormatFloat(max(block, time.Millisecond).Seconds(), 'f', 3, 64)
	bctx, cancel := context.WithTimeout(ctx, b.opts.MaxBlock+blockMargin)
	defer cancel()
	pipe := b.rdb.Pipeline()
	move := pipe.Do(bctx, "BLMOVE", k.list, k.moving, "LEFT", "RIGHT", secs)
	fetch := mFetch.EvalSha(bctx, redisconn.NoRetry(pipe), k.fetchKeys(), args...)
	_, err := pipe.Exec(bctx)
	if err := move.Err(); err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		b.polls.Store(true) // it did not wait: poll from now on (the script's reply still counts)
	}
	if isNoScript(fetch.Err()) {
		return mFetch.Run(ctx, b.scr, k.fetchKeys(), args...).StringSlice()
	}
	// err may be the BLMOVE's redis.Nil (it timed out): the script's own
	// reply decides. A script with neither reply nor error was not run or
	// not read (go-redis does not stamp every failure on the commands).
	if fetch.Err() == nil && fetch.Val() == nil {
		if err == nil || err == goredis.Nil {
			err = errors.New("fetch script queued behind BLMOVE: no reply")
		}
		return nil, err
	}
	return fetch.StringSlice()
}

// sleep waits d, or until ctx ends or the broker is closed.
func (b *MachineryBroker) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closed:
		return driver.ErrClosed
	case <-t.C:
		return nil
	}
}

// promoteAfter moves the due delayed tasks onto their lists d (and a
// millisecond, for the clocks' rounding) from now, best effort (the fetch
// after the wait does it too). The returned stop cancels it, or waits for
// it to finish if it began.
func (b *MachineryBroker) promoteAfter(d time.Duration) (stop func()) {
	done := make(chan struct{})
	t := time.AfterFunc(d+time.Millisecond, func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.MaxBlock+blockMargin)
		defer cancel()
		b.promote(ctx)
	})
	return func() {
		if !t.Stop() {
			<-done
		}
	}
}

// blockCap is the longest wait waitFetch may ask of rdb: go-redis reads a
// pipeline's replies under the client's ReadTimeout, so the wait stays
// below it (by half of it, at most 1s). No cap for a client without a read
// timeout, or one whose options it cannot see.
func blockCap(rdb goredis.UniversalClient) time.Duration {
	c, ok := rdb.(*goredis.Client)
	if !ok {
		return time.Duration(math.MaxInt64)
	}
	rt := c.Options().ReadTimeout
	if rt <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return rt - min(rt/2, time.Second)
}

// promote moves the due tasks of machinery's delayed set onto their
// queues' lists (each once, whoever else promotes: machinery's workers do
// the same), and returns how long until the first task not yet due will
// be (by the server's clock; negative when none). A task neither its
// RoutingKey nor the default queue can take (both name keys of another
// type) is kept in the set rather than lost, and skipped by the next
// batches so it cannot hold up the tasks due after it; the loop stops at
// a short batch or one that changed nothing, so it never spins on such
// tasks.
func (b *MachineryBroker) promote(ctx context.Context) (time.Duration, error) {
	skip := 0
	for {
		res, err := mDue.Run(ctx, b.scr, b.keys("").dueKeys(), 100, skip).StringSlice()
		if err != nil {
			return -1, fmt.Errorf("redis machinery broker: read delayed tasks: %w", err)
		}
		if len(res) < 2 {
			return -1, fmt.Errorf("redis machinery broker: read delayed tasks: %d replies, want at least 2", len(res))
		}
		next := time.Duration(-1)
		if res[1] != "" {
			now, _ := strconv.ParseFloat(res[0], 64)
			at, _ := strconv.ParseFloat(res[1], 64)
			next = max(time.Duration(at-now), 0)
		}
		due := res[2:]
		if len(due) == 0 {
			return next, nil
		}
		pipe := b.rdb.Pipeline()
		cmds := make([]*goredis.Cmd, 0, len(due))
		for _, m := range due {
			var s struct{ RoutingKey string }
			_ = json.Unmarshal([]byte(m), &s) // a bad body goes to the default queue, where Fetch sets it aside
			q := s.RoutingKey
			if q == "" {
				q = b.opts.DefaultQueue
			}
			cmds = append(cmds, mPromote.Eval(ctx, redisconn.NoRetry(pipe), b.keys(q).promoteKeys(), m))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return -1, fmt.Errorf("redis machinery broker: promote delayed tasks: %w", err)
		}
		moved, stuck := 0, 0
		for _, c := range cmds {
			switch n, _ := c.Int64(); {
			case n > 0:
				moved++
			case n < 0:
				stuck++
			}
		}
		skip += stuck
		if len(due) < 100 || moved+stuck == 0 {
			return next, nil
		}
	}
}

// Ack ends the leases of ds for good.
func (b *MachineryBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if len(ds) == 0 {
		return nil
	}
	if err := b.isClosed(); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	k := b.keys(ds[0].Queue)
	toks := make([]any, 0, len(ds))
	for _, d := range ds {
		toks = append(toks, d.Handle)
	}
	res, err := mSettle.Run(ctx, b.scr, k.settleKeys(), toks...).Int64Slice()
	if err != nil {
		return driver.BatchErrors(len(ds), fmt.Errorf("redis machinery broker: ack: %w", err))
	}
	if len(res) != len(ds) {
		return driver.BatchErrors(len(ds), fmt.Errorf("redis machinery broker: ack answered %d of %d", len(res), len(ds)))
	}
	var errs []error
	for i, r := range res {
		if r == 0 {
			if errs == nil {
				errs = make([]error, len(ds))
			}
			errs[i] = driver.ErrLeaseLost
		}
	}
	return errs
}

// Release gives a delivery back: onto the head of machinery's list, or,
// with a notBefore in the future, into machinery's delayed set.
func (b *MachineryBroker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	k := b.keys(d.Queue)
	due := ""
	if notBefore.After(time.Now()) {
		due = strconv.FormatInt(notBefore.UnixNano(), 10)
	}
	return b.lost(mRelease.Run(ctx, b.scr, k.releaseKeys(), d.Handle, due, k.count, machineryCountTTL.Milliseconds()).Int64())
}

// Extend renews the lease of d.
func (b *MachineryBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	return b.lost(mExtend.Run(ctx, b.scr, b.keys(d.Queue).extendKeys(), d.Handle, lease.Milliseconds()).Int64())
}

// Reject keeps d in its queue's set-aside list ({Prefix:queue}:dead,
// newest first, each entry {"body", "reason", "at"}), bounded by DeadMax.
func (b *MachineryBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	k := b.keys(d.Queue)
	return b.lost(mReject.Run(ctx, b.scr, k.rejectKeys(), d.Handle, reason, b.opts.DeadMax).Int64())
}

// Close makes every later call return driver.ErrClosed; a Fetch waiting
// on machinery's list returns within MaxBlock. It closes the client if
// CloseClient is set.
func (b *MachineryBroker) Close() error {
	var err error
	b.closeMu.Do(func() {
		close(b.closed)
		if b.opts.CloseClient {
			err = b.rdb.Close()
		}
	})
	return err
}

func (b *MachineryBroker) isClosed() error {
	select {
	case <-b.closed:
		return driver.ErrClosed
	default:
		return nil
	}
}

func (b *MachineryBroker) lost(n int64, err error) error {
	if err != nil {
		return fmt.Errorf("redis machinery broker: %w", err)
	}
	if n == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

var errMachineryCluster = errors.New("machinery's Redis keys carry no hash tags: use a single node or Sentinel")

package redisbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	// PollInterval is how long an idle Fetch waits between two looks at
	// the queue and the delayed set (machinery itself blocks up to its
	// normal_tasks_poll_period, 1s, and polls the delayed set every
	// delayed_tasks_poll_period, 500ms). Default: 100ms.
	PollInterval time.Duration
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
// at the head of machinery's list). A task a machinery worker popped
// (BLPOP) is outside them: if that worker dies, machinery loses it.
//
// Single node and Sentinel only: machinery's keys carry no hash tags.
type MachineryBroker struct {
	rdb     goredis.UniversalClient
	scr     goredis.Scripter
	opts    MachineryOptions
	closed  chan struct{}
	closeMu sync.Once
}

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
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	if o.DeadMax <= 0 {
		o.DeadMax = DefaultArchiveMaxCount
	}
	redisconn.Quiet()
	return &MachineryBroker{rdb: rdb, scr: redisconn.NoRetry(rdb), opts: o, closed: make(chan struct{})}
}

// mKeys are the keys of one queue: machinery's list, then errand's lease
// set (token -> deadline in ms), leased bodies (token -> body), token
// counter and set-aside list.
type mKeys struct{ list, leases, bodies, seq, dead, count string }

func (b *MachineryBroker) keys(queue string) mKeys {
	k := b.opts.Prefix + ":" + queue
	return mKeys{list: queue, leases: k + ":leases", bodies: k + ":bodies", seq: k + ":seq", dead: k + ":dead", count: k + ":n:"}
}

// mLuaNow sets now (ms) and nowns (ns, as a string) by the server's clock.
const mLuaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowns = t[1] .. string.format('%06d', tonumber(t[2])) .. '000'
`

// mLuaCountKey sets ck to the key of the delivery count of the task body
// names (ARGV[1] .. UUID), nil for a body without one.
const mLuaCountKey = `
local function countkey(prefix, body)
  local ok, s = pcall(cjson.decode, body)
  if not ok or type(s) ~= 'table' then return nil end
  if type(s.UUID) == 'string' then return prefix .. s.UUID end
  if type(s.ErrandOpaque) == 'table' and type(s.ErrandOpaque.ID) == 'string' then return prefix .. s.ErrandOpaque.ID end
  return nil
end
`

// mFetch puts back expired leases at the head of machinery's list, then
// moves up to limit tasks from the list into leases, counting each task's
// deliveries (by UUID, kept CountTTL after the last).
//
//	KEYS[1] list, KEYS[2] leases, KEYS[3] bodies, KEYS[4] seq
//	ARGV[1] count key prefix, ARGV[2] limit, ARGV[3] lease (ms), ARGV[4] count TTL (ms)
//	-> {token1, body1, count1, token2, body2, count2, ...}
var mFetch = goredis.NewScript(mLuaNow + mLuaCountKey + `
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for i = #expired, 1, -1 do
  local body = redis.call('HGET', KEYS[3], expired[i])
  if body then redis.call('LPUSH', KEYS[1], body) end
  redis.call('ZREM', KEYS[2], expired[i])
  redis.call('HDEL', KEYS[3], expired[i])
end
local out = {}
for i = 1, tonumber(ARGV[2]) do
  local body = redis.call('LPOP', KEYS[1])
  if not body then break end
  local tok = tostring(redis.call('INCR', KEYS[4]))
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), tok)
  redis.call('HSET', KEYS[3], tok, body)
  local n = 1
  local ck = countkey(ARGV[1], body)
  if ck then
    n = redis.call('INCR', ck)
    redis.call('PEXPIRE', ck, ARGV[4])
  end
  out[#out + 1] = tok
  out[#out + 1] = body
  out[#out + 1] = tostring(n)
end
return out
`)

// machineryCountTTL is how long a task's delivery count outlives its
// last fetch by errand (a task a machinery worker took after errand gave it
// back is never acked here).
const machineryCountTTL = 7 * 24 * time.Hour

// mDue lists the due members of machinery's delayed set.
//
//	KEYS[1] delayed set; ARGV[1] most to list
var mDue = goredis.NewScript(mLuaNow + `
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowns, 'LIMIT', 0, tonumber(ARGV[1]))
`)

// mPromote moves one due task from the delayed set onto its list, once.
//
//	KEYS[1] delayed set, KEYS[2] list; ARGV[1] the member
var mPromote = goredis.NewScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return 1
end
return 0
`)

// mSettle ends leases: 1 for each token still leased (its body and
// delivery count removed), 0 for a lost one.
//
//	KEYS[1] leases, KEYS[2] bodies; ARGV[1] count key prefix, ARGV[2..] tokens
var mSettle = goredis.NewScript(mLuaCountKey + `
local out = {}
for i = 2, #ARGV do
  local tok = ARGV[i]
  local body = redis.call('HGET', KEYS[2], tok)
  if redis.call('ZREM', KEYS[1], tok) == 1 then
    redis.call('HDEL', KEYS[2], tok)
    local ck = body and countkey(ARGV[1], body)
    if ck then redis.call('DEL', ck) end
    out[i - 1] = 1
  else
    out[i - 1] = 0
  end
end
return out
`)

// mRelease ends a lease and gives the task back: onto the head of the list
// (ARGV[2] empty) or into the delayed set at score ARGV[2].
//
//	KEYS[1] leases, KEYS[2] bodies, KEYS[3] list, KEYS[4] delayed set
//	ARGV[1] token, ARGV[2] due time in ns or ''
var mRelease = goredis.NewScript(`
local body = redis.call('HGET', KEYS[2], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 or not body then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] == '' then
  redis.call('LPUSH', KEYS[3], body)
else
  redis.call('ZADD', KEYS[4], ARGV[2], body)
end
return 1
`)

// mExtend renews a lease still held.
//
//	KEYS[1] leases; ARGV[1] token, ARGV[2] lease (ms)
var mExtend = goredis.NewScript(mLuaNow + `
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
`)

// mReject ends a lease and keeps the task in the queue's set-aside list.
//
//	KEYS[1] leases, KEYS[2] bodies, KEYS[3] dead
//	ARGV[1] token, ARGV[2] reason, ARGV[3] most kept, ARGV[4] count key prefix
var mReject = goredis.NewScript(mLuaNow + mLuaCountKey + `
local body = redis.call('HGET', KEYS[2], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 or not body then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
local ck = countkey(ARGV[4], body)
if ck then redis.call('DEL', ck) end
redis.call('LPUSH', KEYS[3], cjson.encode({body = body, reason = ARGV[2], at = now}))
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[3]) - 1)
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
// tasks of queue, waiting PollInterval between looks while there are none.
func (b *MachineryBroker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	k := b.keys(queue)
	for {
		if err := b.isClosed(); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := b.promote(ctx); err != nil {
			return nil, err
		}
		res, err := mFetch.Run(ctx, b.scr, []string{k.list, k.leases, k.bodies, k.seq}, k.count, max(limit, 1), lease.Milliseconds(), machineryCountTTL.Milliseconds()).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis machinery broker: fetch %q: %w", queue, err)
		}
		if len(res) > 0 {
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
			return out, nil
		}
		t := time.NewTimer(b.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-b.closed:
			t.Stop()
			return nil, driver.ErrClosed
		case <-t.C:
		}
	}
}

// promote moves the due tasks of machinery's delayed set onto their
// queues' lists (each once, whoever else promotes: machinery's workers do
// the same).
func (b *MachineryBroker) promote(ctx context.Context) error {
	for {
		due, err := mDue.Run(ctx, b.scr, []string{b.opts.DelayedTasksKey}, 100).StringSlice()
		if err != nil {
			return fmt.Errorf("redis machinery broker: read delayed tasks: %w", err)
		}
		if len(due) == 0 {
			return nil
		}
		pipe := b.rdb.Pipeline()
		for _, m := range due {
			var s struct{ RoutingKey string }
			_ = json.Unmarshal([]byte(m), &s) // a bad body goes to the default queue, where Fetch sets it aside
			q := s.RoutingKey
			if q == "" {
				q = b.opts.DefaultQueue
			}
			mPromote.Eval(ctx, redisconn.NoRetry(pipe), []string{b.opts.DelayedTasksKey, q}, m)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redis machinery broker: promote delayed tasks: %w", err)
		}
		if len(due) < 100 {
			return nil
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
	toks := make([]any, 0, len(ds)+1)
	toks = append(toks, k.count)
	for _, d := range ds {
		toks = append(toks, d.Handle)
	}
	res, err := mSettle.Run(ctx, b.scr, []string{k.leases, k.bodies}, toks...).Int64Slice()
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
	return b.lost(mRelease.Run(ctx, b.scr, []string{k.leases, k.bodies, k.list, b.opts.DelayedTasksKey}, d.Handle, due).Int64())
}

// Extend renews the lease of d.
func (b *MachineryBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	return b.lost(mExtend.Run(ctx, b.scr, []string{b.keys(d.Queue).leases}, d.Handle, lease.Milliseconds()).Int64())
}

// Reject keeps d in its queue's set-aside list ({Prefix}:{queue}:dead,
// newest first, each entry {"body", "reason", "at"}), bounded by DeadMax.
func (b *MachineryBroker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	k := b.keys(d.Queue)
	return b.lost(mReject.Run(ctx, b.scr, []string{k.leases, k.bodies, k.dead}, d.Handle, reason, b.opts.DeadMax, k.count).Int64())
}

// Close makes blocked Fetch calls return, and closes the client if
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

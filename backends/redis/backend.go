package redisbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

// Options configures a Backend.
type Options struct {
	// Prefix starts every key the backend writes. Default: "errand".
	Prefix string
	// ResultExpiry is how long a task's state is kept after its last write.
	// Default: 1h.
	ResultExpiry time.Duration
	// GroupExpiry is how long a group's metadata is kept after its last
	// completion. Default: 24h; never less than ResultExpiry.
	GroupExpiry time.Duration
	// CallTimeout bounds each call to Redis that has no earlier ctx
	// deadline (a blocking fetch waits MaxBlock on top). It takes effect
	// on clients that honour ctx deadlines: ContextTimeoutEnabled, which
	// clients made by Open have; set it on your own. Negative: no bound
	// beyond the client's own timeouts. Default: 10s.
	CallTimeout time.Duration
	// CloseClient: Close also closes the client (set by Open). Default: false.
	CloseClient bool
	// Logger receives go-redis's own log lines (connection errors, pool
	// warnings), at Warn with the attribute component=go-redis. go-redis
	// has one logger per process: errand replaces its stderr logger on the
	// first New or Open of a Redis broker or backend, and its lines go to
	// the most recent non-nil Logger given to either, in any Options.
	// Default: nil, which discards them unless another broker or backend
	// set one.
	Logger *slog.Logger
}

// Backend is a driver.Backend on Redis. It is safe for concurrent use.
type Backend struct {
	rdb    goredis.UniversalClient
	opts   Options
	closed atomic.Bool
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Expirer = (*Backend)(nil)
)

// New returns a backend on rdb. opts may be nil.
func New(rdb goredis.UniversalClient, opts *Options) *Backend {
	b := &Backend{rdb: rdb}
	if opts != nil {
		b.opts = *opts
	}
	redisconn.UseLogger(b.opts.Logger)
	if b.opts.Prefix == "" {
		b.opts.Prefix = "errand"
	}
	b.opts.ResultExpiry, b.opts.GroupExpiry = driver.ExpiryDefaults(b.opts.ResultExpiry, b.opts.GroupExpiry)
	if b.opts.CallTimeout == 0 {
		b.opts.CallTimeout = 10 * time.Second
	}
	return b
}

func init() {
	driver.RegisterBackend("redis", Open)
	driver.RegisterBackend("rediss", Open)
}

// Open returns a backend for a redis:// or rediss:// URL (see the package
// doc). The backend owns the client it makes.
func Open(ctx context.Context, u *url.URL) (driver.Backend, error) {
	rdb, own, err := redisconn.Open(ctx, u, "prefix", "result_expiry", "group_expiry", "timeout")
	if err != nil {
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	opts := &Options{CloseClient: true, Prefix: own.Get("prefix")}
	if err := driver.DurationParams(own, map[string]*time.Duration{"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry, "timeout": &opts.CallTimeout}); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	return New(rdb, opts), nil
}

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

func (b *Backend) taskKey(id string) string { return b.opts.Prefix + ":task:" + id }

type groupKeys struct{ meta, members, done string }

func (b *Backend) groupKeys(g string) groupKeys {
	k := "{" + b.opts.Prefix + ":group:" + g + "}:"
	return groupKeys{k + "meta", k + "members", k + "done"}
}

func (b *Backend) err(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, goredis.ErrClosed) || b.closed.Load():
		return fmt.Errorf("redis backend: %w", driver.ErrClosed)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("redis backend: %w", err)
}

// SetStates writes sts with one SET ... PX each, in order, one alone and
// many in one pipeline (split per node on a cluster). A state that cannot
// be encoded, or whose command fails, fails alone.
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	return b.setStates(ctx, sts, false)
}

// setStates writes sts, with SET ... PX, or with SET ... NX PX (leaving a
// state already there) when nx: one alone, many in one pipeline. It
// answers one error per state, or nil when every one succeeded.
func (b *Backend) setStates(ctx context.Context, sts []*driver.TaskState, nx bool) []error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(sts))
		}
		errs[i] = err
	}
	if len(sts) == 1 && !nx {
		v, err := json.Marshal(sts[0])
		if err != nil {
			return []error{fmt.Errorf("redis backend: encode state of %s: %w", sts[0].TaskUUID, err)}
		}
		if err := b.rdb.Set(ctx, b.taskKey(sts[0].TaskUUID), v, b.opts.ResultExpiry).Err(); err != nil {
			return []error{b.err(ctx, err)}
		}
		return nil
	}
	pipe := b.rdb.Pipeline()
	var queued []int // the index in sts of each command queued
	for i := range sts {
		if err := b.queueStates(ctx, pipe, sts[i:i+1], nx); err != nil {
			fail(i, err)
			continue
		}
		queued = append(queued, i)
	}
	if len(queued) == 0 {
		return errs
	}
	cmds, _ := pipe.Exec(ctx) // errors are read per command below
	if len(cmds) != len(queued) {
		return driver.BatchErrors(len(sts), b.err(ctx, fmt.Errorf("pipeline answered %d replies for %d commands", len(cmds), len(queued))))
	}
	for j, c := range cmds {
		if err := c.Err(); err != nil && err != goredis.Nil {
			fail(queued[j], b.err(ctx, err))
		}
	}
	return errs
}

// queueStates queues on pipe one SET ... PX per state (SET ... NX PX when
// nx). It encodes every state before it queues anything, so an encode
// error leaves pipe as it was.
func (b *Backend) queueStates(ctx context.Context, pipe goredis.Pipeliner, sts []*driver.TaskState, nx bool) error {
	vs := make([][]byte, len(sts))
	for i, st := range sts {
		v, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("redis backend: encode state of %s: %w", st.TaskUUID, err)
		}
		vs[i] = v
	}
	for i, st := range sts {
		if nx {
			pipe.SetNX(ctx, b.taskKey(st.TaskUUID), vs[i], b.opts.ResultExpiry)
		} else {
			pipe.Set(ctx, b.taskKey(st.TaskUUID), vs[i], b.opts.ResultExpiry)
		}
	}
	return nil
}

func decodeState(id string, v string) (*driver.TaskState, error) {
	var st driver.TaskState
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return nil, fmt.Errorf("redis backend: decode state of %s: %w", id, err)
	}
	return &st, nil
}

// GetState reads the task's state.
func (b *Backend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	v, err := b.rdb.Get(ctx, b.taskKey(id)).Result()
	if err == goredis.Nil {
		return nil, fmt.Errorf("redis backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	if err != nil {
		return nil, b.err(ctx, err)
	}
	return decodeState(id, v)
}

// initGroupScript: KEYS meta, members, done; ARGV expiry ms, member IDs...
// The meta hash holds the size ("total"), one field "m:ID" per member (for
// the completion's membership check) and, later, the chord's claimer.
var initGroupScript = goredis.NewScript(`
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
for i = 2, #ARGV, 1000 do
  local j = math.min(i + 999, #ARGV)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, j))
  local fields = {}
  for k = i, j do
    fields[#fields + 1] = 'm:' .. ARGV[k]
    fields[#fields + 1] = 1
  end
  redis.call('HSET', KEYS[1], unpack(fields))
end
redis.call('HSET', KEYS[1], 'total', #ARGV - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
`)

// InitGroup records the members in order, atomically.
func (b *Backend) InitGroup(ctx context.Context, g string, ids []string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	k := b.groupKeys(g)
	args := make([]any, 0, len(ids)+1)
	args = append(args, b.opts.GroupExpiry.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	return b.err(ctx, initGroupScript.Run(ctx, b.rdb, []string{k.meta, k.members, k.done}, args...).Err())
}

// completeScript: KEYS meta, members, done; ARGV member, expiry ms.
// Returns {done, total}, {-1, 0} for an unknown group, or {-2, total} for
// a UUID that is not a member (nothing changed).
var completeScript = goredis.NewScript(`
local total = redis.call('HGET', KEYS[1], 'total')
if not total then return {-1, 0} end
if redis.call('HEXISTS', KEYS[1], 'm:' .. ARGV[1]) == 0 then return {-2, tonumber(total)} end
redis.call('SADD', KEYS[3], ARGV[1])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return {redis.call('SCARD', KEYS[3]), tonumber(total)}
`)

// CompleteGroupMember marks the member done (idempotent, O(1)) and extends
// the group's life. A UUID that is not a member (no "m:ID" field in the
// group's hash) changes nothing and returns driver.ErrNotMember; the check
// and the count are one script, so nothing can slip between them.
func (b *Backend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	k := b.groupKeys(g)
	r, err := completeScript.Run(ctx, b.rdb, []string{k.meta, k.members, k.done}, id, b.opts.GroupExpiry.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, b.err(ctx, err)
	}
	switch r[0] {
	case -1:
		return 0, 0, fmt.Errorf("redis backend: group %s: %w", g, driver.ErrGroupNotFound)
	case -2:
		return 0, 0, fmt.Errorf("redis backend: task %s, group %s: %w", id, g, driver.ErrNotMember)
	}
	return int(r[0]), int(r[1]), nil
}

// claimScript: KEYS meta; ARGV claimer. 1 won, 0 lost, -1 unknown group.
var claimScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local c = redis.call('HGET', KEYS[1], 'claimer')
if not c then
  redis.call('HSET', KEYS[1], 'claimer', ARGV[1])
  return 1
end
if c == ARGV[1] then return 1 end
return 0
`)

// ClaimChord is a compare-and-set on the group's claimer.
func (b *Backend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	n, err := claimScript.Run(ctx, b.rdb, []string{b.groupKeys(g).meta}, claimer).Int()
	if err != nil {
		return false, b.err(ctx, err)
	}
	if n < 0 {
		return false, fmt.Errorf("redis backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	return n == 1, nil
}

// GroupStates reads the member list, then all member states in one
// pipeline (split per node on a cluster).
func (b *Backend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ids, err := b.rdb.LRange(ctx, b.groupKeys(g).members, 0, -1).Result()
	if err != nil {
		return nil, b.err(ctx, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("redis backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	pipe := b.rdb.Pipeline()
	cmds := make([]*goredis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, b.taskKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != goredis.Nil {
		return nil, b.err(ctx, err)
	}
	out := make([]*driver.TaskState, len(ids))
	for i, c := range cmds {
		v, err := c.Result()
		if err == goredis.Nil {
			out[i] = &driver.TaskState{TaskUUID: ids[i], State: driver.StatePending}
			continue
		}
		if err != nil {
			return nil, b.err(ctx, err)
		}
		if out[i], err = decodeState(ids[i], v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Close makes later calls return driver.ErrClosed; it closes the client only
// if Options.CloseClient.
func (b *Backend) Close() error {
	if b.closed.Swap(true) || !b.opts.CloseClient {
		return nil
	}
	return b.rdb.Close()
}

// bound returns ctx limited to CallTimeout (see Options.CallTimeout).
func (b *Backend) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.opts.CallTimeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

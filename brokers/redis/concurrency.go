package redisbroker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.ConcurrencyLimiter = (*Broker)(nil)

// Concurrency limits (driver.ConcurrencyLimiter): one sorted set per key,
// under the hash tag {prefix} like every key of no single queue
// (scripts.go):
//
//	P:concurrency:KEY  zset  holder -> when its slot lapses (ms, server
//	                         clock); an entry past its time is free
//
// Each method is one script over the keys it names, on the server's clock
// (TIME). The keys of every limit share the one hash tag {prefix}, so an
// Acquire of a task's and its queue's keys runs on one slot, all or none,
// on Redis Cluster as on a single node or under Sentinel: the limits of a
// prefix live on the node of that slot (one script per attempt started,
// one per lease extension). A set expires a second after its latest
// slot would lapse, so a key nobody uses leaves nothing behind.

// luaKeepSlots defines keep(key): the set key expires a second after its
// latest entry's time (at least now), over the local now.
const luaKeepSlots = `
local function keep(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now) + 1000) end
end
`

// acquireScript takes a slot of every key for holder, all or none. Returns
// 1 when taken, 0 when one key is full.
var acquireScript = newScript(`
-- acquire
-- KEYS[i]   -> P:concurrency:KEY of slot i (i = 1, 2, ...)
-- ARGV[1]   -> holder
-- ARGV[2]   -> ttl (ms)
-- ARGV[2+i] -> the limit of slot i
local slots = KEYS
local holder, ttl = ARGV[1], tonumber(ARGV[2])
`, luaNow, luaKeepSlots, `
for i, key in ipairs(slots) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local others = redis.call('ZCARD', key)
  if redis.call('ZSCORE', key, holder) then others = others - 1 end
  if others >= tonumber(ARGV[2 + i]) then return 0 end
end
for _, key in ipairs(slots) do
  redis.call('ZADD', key, now + ttl, holder)
  keep(key)
end
return 1
`)

// renewScript renews holder's slot of every key that has not lapsed.
// Returns the indexes (1-based) of the keys whose slot lapsed or was
// never held, none renewed.
var renewScript = newScript(`
-- renew
-- KEYS[i] -> P:concurrency:KEY of slot i (i = 1, 2, ...)
-- ARGV[1] -> holder
-- ARGV[2] -> ttl (ms)
local slots = KEYS
local holder, ttl = ARGV[1], tonumber(ARGV[2])
`, luaNow, luaKeepSlots, `
local lost = {}
for i, key in ipairs(slots) do
  local lapses = tonumber(redis.call('ZSCORE', key, holder))
  if lapses and lapses > now then
    redis.call('ZADD', key, now + ttl, holder)
    keep(key)
  else
    if lapses then redis.call('ZREM', key, holder) end
    lost[#lost + 1] = i
  end
end
return lost
`)

// freeScript gives holder's slots of every key back.
var freeScript = newScript(`
-- free
-- KEYS[i] -> P:concurrency:KEY of slot i (i = 1, 2, ...)
-- ARGV[1] -> holder
local slots = KEYS
local holder = ARGV[1]
for _, key in ipairs(slots) do redis.call('ZREM', key, holder) end
return 1
`)

// slotKeys are the keys of acquireScript, renewScript and freeScript for
// the limits keys, in their order.
func (b *Broker) slotKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = b.global("concurrency:" + k)
	}
	return out
}

// Acquire takes a slot of every key of slots for holder, all or none (see
// driver.ConcurrencyLimiter).
func (b *Broker) Acquire(ctx context.Context, holder string, slots []driver.Slot, ttl time.Duration) (bool, error) {
	if len(slots) == 0 {
		return true, nil
	}
	keys := make([]string, len(slots))
	args := []any{holder, max(ttl.Milliseconds(), 1)}
	for i, s := range slots {
		if s.Limit < 1 {
			return false, fmt.Errorf("redis broker: concurrency limit %q: limit %d: want 1 or more", s.Key, s.Limit)
		}
		keys[i] = s.Key
		args = append(args, s.Limit)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	n, err := honourCancel(ctx, func() (int64, error) {
		return acquireScript.Run(ctx, b.scripts, b.slotKeys(keys), args...).Int64()
	})
	if err != nil {
		return false, b.err(ctx, err)
	}
	return n == 1, nil
}

// Renew renews holder's slots of keys for ttl; a lapsed one is not, and
// makes the answer an error wrapping driver.ErrLeaseLost.
func (b *Broker) Renew(ctx context.Context, holder string, keys []string, ttl time.Duration) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	lost, err := honourCancel(ctx, func() ([]int64, error) {
		return renewScript.Run(ctx, b.scripts, b.slotKeys(keys), holder, max(ttl.Milliseconds(), 1)).Int64Slice()
	})
	if err != nil {
		return b.err(ctx, err)
	}
	if len(lost) == 0 {
		return nil
	}
	names := make([]string, 0, len(lost))
	for _, i := range lost {
		if i >= 1 && int(i) <= len(keys) {
			names = append(names, keys[i-1])
		}
	}
	return fmt.Errorf("redis broker: concurrency slots %s of %q: %w", strings.Join(names, ", "), holder, driver.ErrLeaseLost)
}

// Free gives holder's slots of keys back.
func (b *Broker) Free(ctx context.Context, holder string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return freeScript.Run(ctx, b.scripts, b.slotKeys(keys), holder).Result()
	})
	return b.err(ctx, err)
}

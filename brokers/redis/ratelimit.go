package redisbroker

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.RateLimiter = (*Broker)(nil)

// Rate limits (driver.RateLimiter): one hash per bucket, under the hash
// tag {prefix} like every key of no single queue (scripts.go):
//
//	P:rate:KEY  hash  tokens  tokens held at ts
//	                  ts      when tokens was computed (ms, server clock)
//	                  next    when the next refused caller should come back (ms)
//
// It expires once it would be full again and no refused caller is due
// (a full bucket is what a missing one means).

// takeScript takes a token from the bucket. Returns the wait in
// microseconds: 0 when a token was taken. Everything, the clock included
// (TIME, here to the microsecond), happens in the one script, so every
// worker of every process shares one bucket and one clock. The memory
// broker's take does the same arithmetic.
var takeScript = newScript(`
-- take
-- KEYS[1] -> P:rate:KEY
-- ARGV[1] -> rate (tokens a second)
-- ARGV[2] -> burst (tokens)
local bucket = KEYS[1]
local rate, burst = tonumber(ARGV[1]) / 1000, tonumber(ARGV[2]) -- rate: tokens a ms
local EPSILON = 1e-9      -- a token short by less than this is a whole token
local KEEP_MARGIN = 1000  -- ms the bucket outlives the moment it would be full
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local s = redis.call('HMGET', bucket, 'tokens', 'ts', 'next')
local tokens = tonumber(s[1]) or burst
local ts = tonumber(s[2]) or now
local nxt = tonumber(s[3]) or 0
if now > ts then
  tokens = tokens + (now - ts) * rate
  ts = now
end
if tokens > burst then tokens = burst end
local wait = 0
if tokens >= 1 - EPSILON then
  tokens = tokens - 1
else
  local due = now + (1 - tokens) / rate
  if nxt < due then nxt = due end
  wait = nxt - now
  nxt = nxt + 1 / rate
end
redis.call('HSET', bucket, 'tokens', string.format('%.6f', tokens), 'ts', string.format('%.3f', ts), 'next', string.format('%.3f', nxt))
local keep = math.max(nxt - now, (burst - tokens) / rate) + KEEP_MARGIN
redis.call('PEXPIRE', bucket, math.ceil(keep))
if wait > 0 then return math.max(1, math.ceil(wait * 1000)) end
return 0
`)

// takeKeys are the keys of takeScript for the bucket key.
func (b *Broker) takeKeys(key string) []string { return []string{b.global("rate:" + key)} }

// Take takes a token from the bucket key (see driver.RateLimiter).
func (b *Broker) Take(ctx context.Context, key string, rate float64, burst int) (time.Duration, error) {
	if !(rate > 0) || math.IsInf(rate, 0) || burst < 1 {
		return 0, fmt.Errorf("redis broker: rate limit %q: rate %v and burst %d: want rate > 0 and burst >= 1", key, rate, burst)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	us, err := honourCancel(ctx, func() (int64, error) {
		return takeScript.Run(ctx, b.scripts, b.takeKeys(key), strconv.FormatFloat(rate, 'g', -1, 64), burst).Int64()
	})
	if err != nil {
		return 0, b.err(ctx, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

package redisbroker

import goredis "github.com/redis/go-redis/v9"

// Every script takes all its keys in KEYS, and every key of a queue shares
// the hash tag {prefix:queue}, so the scripts run on Redis Cluster. Times
// come from the server's clock (TIME), so workers with skewed clocks agree
// on when a message is due and when a lease ran out.
//
// Keys of a queue (K = {prefix:queue}):
//
//	K:pending   list  message IDs due now, in delivery order
//	K:delayed   zset  message IDs by due time (ms)
//	K:inflight  zset  leased message IDs by lease deadline (ms)
//	K:msgs      hash  message ID -> envelope (task ID, newline, body)
//	K:tokens    hash  message ID -> lease token of its current delivery
//	K:count     hash  message ID -> deliveries so far
//	K:dead      list  rejected message IDs
//	K:reasons   hash  rejected message ID -> reason
//	K:notify    list  wake-up tokens for blocked fetchers
//
// An entry of K:pending or K:delayed with no envelope in K:msgs was put
// there by something other than errand (an LPUSH by hand, another
// program): its text is the message. Inspection lists it with an empty ID
// and the text as body; the fetch script gives it a fresh message ID
// (TOKEN:fN) and an envelope (that ID, newline, the text) and hands it out
// like any message, so a worker that cannot decode it sets it aside in
// K:dead with the reason. Nothing on the lists vanishes unseen.
//
// None of these keys has a TTL: recovery of a crashed consumer's messages
// depends only on K:inflight and K:msgs, which nothing expires.

const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

const luaNotify = `
local function notify(key, n)
  for i = 1, math.min(n, 64) do redis.call('LPUSH', key, '1') end
  redis.call('LTRIM', key, 0, 255)
end
`

// publish: KEYS pending, delayed, msgs, notify; ARGV triples (id, envelope, due ms or 0).
var publishScript = goredis.NewScript(luaNow + luaNotify + `
local n = 0
for i = 1, #ARGV, 3 do
  local id, env, due = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  redis.call('HSET', KEYS[3], id, env)
  if due > now then
    redis.call('ZADD', KEYS[2], due, id)
  else
    redis.call('RPUSH', KEYS[1], id)
  end
  n = n + 1
end
notify(KEYS[4], n)
return n
`)

// fetch: KEYS pending, delayed, inflight, msgs, tokens, count;
// ARGV max, lease ms, promote batch, token prefix.
// Returns {id, envelope, token, deliveries, ...} or {'wait', next wake ms or -1, now}.
var fetchScript = goredis.NewScript(luaNow + `
local batch = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, batch)
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('RPUSH', KEYS[1], id)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, batch)
for i = #expired, 1, -1 do
  local id = expired[i]
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('LPUSH', KEYS[1], id)
end
local out = {}
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if ids then
  local deadline = now + tonumber(ARGV[2])
  for i, id in ipairs(ids) do
    local env = redis.call('HGET', KEYS[4], id)
    if not env then
      -- Foreign: text put on the list by something other than errand, with
      -- no stored envelope. Never dropped: it gets an ID and an envelope
      -- whose body is the text itself, and is handed out like any message
      -- (a worker that cannot decode it rejects it into K:dead).
      local raw = id
      id = ARGV[4] .. ':f' .. i
      env = id .. '\n' .. raw
      redis.call('HSET', KEYS[4], id, env)
    end
    local tok = ARGV[4] .. ':' .. i
    redis.call('ZADD', KEYS[3], deadline, id)
    redis.call('HSET', KEYS[5], id, tok)
    local n = redis.call('HINCRBY', KEYS[6], id, 1)
    out[#out + 1] = id
    out[#out + 1] = env
    out[#out + 1] = tok
    out[#out + 1] = n
  end
end
if #out > 0 then return out end
local nextAt = -1
local d = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #d > 0 then nextAt = tonumber(d[2]) end
local l = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #l > 0 and (nextAt < 0 or tonumber(l[2]) < nextAt) then nextAt = tonumber(l[2]) end
return {'wait', nextAt, now}
`)

// luaOwns checks that ARGV[2] is the current lease token of message ARGV[1]
// in the tokens hash KEYS[2].
const luaOwns = `
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
`

// ack: KEYS inflight, tokens, msgs, count; ARGV id, token.
var ackScript = goredis.NewScript(luaOwns + `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
`)

// release: KEYS inflight, tokens, pending, delayed, notify; ARGV id, token, not-before ms (0: now).
var releaseScript = goredis.NewScript(luaOwns + luaNow + luaNotify + `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local nb = tonumber(ARGV[3])
if nb > now then
  redis.call('ZADD', KEYS[4], nb, ARGV[1])
else
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
notify(KEYS[5], 1)
return 1
`)

// extend: KEYS inflight, tokens; ARGV id, token, lease ms.
var extendScript = goredis.NewScript(luaOwns + luaNow + `
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
`)

// reject: KEYS inflight, tokens, count, dead, reasons; ARGV id, token, reason.
var rejectScript = goredis.NewScript(luaOwns + `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('RPUSH', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[3])
return 1
`)

// purge: KEYS pending, delayed, msgs, count. Returns how many were dropped.
var purgeScript = goredis.NewScript(`
local n = 0
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  n = n + 1
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  n = n + 1
end
redis.call('DEL', KEYS[1], KEYS[2])
return n
`)

package redisbroker

import goredis "github.com/redis/go-redis/v9"

// Every script takes all its keys in KEYS, and every key of a queue shares
// the hash tag {prefix:queue}, so the scripts run on Redis Cluster. Times
// come from the server's clock (TIME), so workers with skewed clocks agree
// on when a message is due and when a lease ran out.
//
// Keys of a queue (K = {prefix:queue}):
//
//	K:pending   list  message IDs of priority 0 due now, in delivery order
//	K:ppending  zset  message IDs of priority 1-255 due now, by
//	                  (256 - priority) * 2^44 + a sequence number (K:pseq;
//	                  negated for a message put back at the head of its
//	                  priority): highest priority first, then FIFO
//	K:prio      hash  message ID -> priority, for priorities 1-255 only
//	K:pseq      string numbers the entries of K:ppending
//	K:delayed   zset  message IDs by due time (ms)
//	K:inflight  zset  leased message IDs by lease deadline (ms)
//	K:msgs      hash  message ID -> envelope (task ID, newline, body)
//	K:tokens    hash  message ID -> lease token of its current delivery
//	                  (delivery number, colon, random)
//	K:seq       string deliveries so far (numbers the tokens)
//	K:count     hash  message ID -> deliveries so far
//	K:archive   zset  archived task IDs by archive time (ms*1000 + a tie-breaker)
//	K:archived  hash  archived task ID -> entry (see below)
//	K:done      list  the most recently acked messages, newest first:
//	                  ack time (ms), newline, envelope; capped at CompletedMax
//	K:acked     string count of acks since the queue began (Stats.Completed)
//	K:notify    list  wake-up tokens for blocked fetchers
//
// An archive entry is one line of JSON (reason, error, attempts, archive
// time in ms, not-before ms, priority; JSON escapes every newline), a
// newline, then the envelope (task ID, newline, body): the body is kept as
// it is, not base64'd.
//
// Keys of no single queue, all under the hash tag {prefix} (P = {prefix}),
// so each script touching them runs on one slot:
//
//	P:queues    set   every queue published to (Queues)
//	P:paused    set   paused queues (Paused)
//	P:workers   hash  worker ID -> heartbeat data
//	P:beats     zset  worker ID -> expiry (ms); Beats drops the expired
//	P:schedules hash  schedule ID -> definition (schedule.go)
//	P:ticks     hash  schedule ID -> latest claimed tick (Unix ms)
//	P:unique:KEY string  the task UUID holding unique key KEY (unique.go)
//	P:rate:task:NAME hash  task NAME's token bucket (ratelimit.go)
//
// Older versions kept rejected messages in K:dead (list of message IDs)
// and K:reasons (message ID -> "ms reason"); every read of a queue's
// archive or stats moves such entries into K:archive (migrateScript,
// which returns at once when K:dead does not exist), since older workers
// may still write K:dead during a rolling upgrade. They kept no P:queues:
// Queues scans for the keys of queues once per Broker value.
//
// An entry of K:pending or K:delayed with no envelope in K:msgs was put
// there by something other than errand (an LPUSH by hand, another
// program): its text is the message. Inspection lists it with an empty ID
// and the text as body; the fetch script gives it a fresh message ID
// (TOKEN:fN) and an envelope (that ID, newline, the text) and hands it out
// like any message, so a worker that cannot decode it sets it aside in
// the archive with the reason. Nothing on the lists vanishes unseen.
//
// None of these keys has a TTL: recovery of a crashed consumer's messages
// depends only on K:inflight and K:msgs, which nothing expires.

const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaPush defines push(pending, ppending, prio, pseq, id, head): put
// message id on its queue's due messages by its priority (K:prio): on the
// list K:pending for priority 0 (at its head when head), else on the zset
// K:ppending, after (before, when head) the others of its priority.
const luaPush = `
local function push(pending, ppending, prio, pseq, id, head)
  local p = tonumber(redis.call('HGET', prio, id) or '0') or 0
  if p <= 0 then
    if head then redis.call('LPUSH', pending, id) else redis.call('RPUSH', pending, id) end
    return
  end
  local n = redis.call('INCR', pseq)
  if head then n = -n end
  redis.call('ZADD', ppending, (256 - p) * 17592186044416 + n, id)
end
`

const luaNotify = `
local function notify(key, n)
  for i = 1, math.min(n, 64) do redis.call('LPUSH', key, '1') end
  redis.call('LTRIM', key, 0, 255)
end
`

// publish: KEYS pending, delayed, msgs, notify, prio, ppending, pseq;
// ARGV quadruples (id, envelope, due ms or 0, priority).
var publishScript = goredis.NewScript(luaNow + luaNotify + luaPush + `
local n = 0
for i = 1, #ARGV, 4 do
  local id, env, due, p = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  redis.call('HSET', KEYS[3], id, env)
  if p > 0 then redis.call('HSET', KEYS[5], id, p) end
  if due > now then
    redis.call('ZADD', KEYS[2], due, id)
  elseif p > 0 then
    push(KEYS[1], KEYS[6], KEYS[5], KEYS[7], id, false)
  else
    redis.call('RPUSH', KEYS[1], id)
  end
  n = n + 1
end
notify(KEYS[4], n)
return n
`)

// fetch: KEYS pending, delayed, inflight, msgs, tokens, count, seq, prio,
// ppending, pseq; ARGV max, lease ms, promote batch, token prefix.
// Returns {id, envelope, token, deliveries, priority, ...} or {'wait',
// next wake ms or -1, now}. The due messages of priority 1-255 (K:ppending)
// go first, highest first; then those of priority 0 (K:pending).
var fetchScript = goredis.NewScript(luaNow + luaPush + `
local batch = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, batch)
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[2], id)
  push(KEYS[1], KEYS[9], KEYS[8], KEYS[10], id, false)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, batch)
for i = #expired, 1, -1 do
  local id = expired[i]
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[5], id)
  push(KEYS[1], KEYS[9], KEYS[8], KEYS[10], id, true)
end
local out = {}
local want = tonumber(ARGV[1])
local ids, prios = {}, {}
local z = redis.call('ZPOPMIN', KEYS[9], want)
for i = 1, #z, 2 do
  ids[#ids + 1] = z[i]
  prios[#ids] = 256 - math.floor(tonumber(z[i + 1]) / 17592186044416 + 0.5)
end
if #ids < want then
  local l = redis.call('LPOP', KEYS[1], want - #ids)
  if l then
    for _, id in ipairs(l) do ids[#ids + 1] = id end
  end
end
if #ids > 0 then
  local deadline = now + tonumber(ARGV[2])
  local seq = redis.call('INCRBY', KEYS[7], #ids) - #ids
  for i, id in ipairs(ids) do
    local env = redis.call('HGET', KEYS[4], id)
    if not env then
      -- Foreign: text put on the list by something other than errand, with
      -- no stored envelope. Never dropped: it gets an ID and an envelope
      -- whose body is the text itself, and is handed out like any message
      -- (a worker that cannot decode it rejects it into the archive).
      local raw = id
      id = ARGV[4] .. ':f' .. i
      env = id .. '\n' .. raw
      redis.call('HSET', KEYS[4], id, env)
    end
    -- The token starts with the delivery's number, so List can give the
    -- in-flight messages in delivery order.
    local tok = (seq + i) .. ':' .. ARGV[4]
    redis.call('ZADD', KEYS[3], deadline, id)
    redis.call('HSET', KEYS[5], id, tok)
    local n = redis.call('HINCRBY', KEYS[6], id, 1)
    out[#out + 1] = id
    out[#out + 1] = env
    out[#out + 1] = tok
    out[#out + 1] = n
    out[#out + 1] = prios[i] or 0
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

// ack: KEYS inflight, tokens, msgs, count, done, acked, prio; ARGV
// completed cap (0: keep none), then one id and lease token per delivery
// (AckBatch: any number; Ack: one). Acks each delivery whose token is
// current, keeping its envelope in K:done and counting it in K:acked in
// the same step; returns one 1 (acked) or 0 (lease lost) per delivery.
var ackScript = goredis.NewScript(luaNow + `
local cap = tonumber(ARGV[1])
local out, acked = {}, 0
for i = 2, #ARGV - 1, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) ~= ARGV[i + 1] then
    out[#out + 1] = 0
  else
    local env = redis.call('HGET', KEYS[3], id)
    redis.call('HDEL', KEYS[7], id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    if env and cap > 0 then
      redis.call('LPUSH', KEYS[5], now .. '\n' .. env)
    end
    acked = acked + 1
    out[#out + 1] = 1
  end
end
if acked > 0 then
  if cap > 0 then redis.call('LTRIM', KEYS[5], 0, cap - 1) end
  redis.call('INCRBY', KEYS[6], acked)
end
return out
`)

// release: KEYS inflight, tokens, pending, delayed, notify, prio,
// ppending, pseq; ARGV id, token, not-before ms (0: now).
var releaseScript = goredis.NewScript(luaOwns + luaNow + luaNotify + luaPush + `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local nb = tonumber(ARGV[3])
if nb > now then
  redis.call('ZADD', KEYS[4], nb, ARGV[1])
else
  push(KEYS[3], KEYS[7], KEYS[6], KEYS[8], ARGV[1], false)
end
notify(KEYS[5], 1)
return 1
`)

// extend: KEYS inflight, tokens; ARGV id, token, lease ms.
var extendScript = goredis.NewScript(luaOwns + luaNow + `
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
`)

// luaArchive defines archive(zset, hash, id, at ms, entry, max count, max
// age ms): keep entry as id's archive entry (replacing any), ordered by at
// (ties in archive order), then drop the entries beyond max count (oldest
// first) and those archived more than max age ago (0: no bound).
const luaArchive = `
local function archive(zkey, hkey, id, at, entry, maxCount, maxAge)
  redis.call('ZREM', zkey, id)
  local base = at * 1000
  local seq = redis.call('ZCOUNT', zkey, base, base + 999)
  redis.call('ZADD', zkey, base + math.min(seq, 999), id)
  redis.call('HSET', hkey, id, entry)
  if maxAge > 0 then
    local cut = string.format('(%.0f', (now - maxAge) * 1000)
    local old = redis.call('ZRANGEBYSCORE', zkey, '-inf', cut)
    for _, o in ipairs(old) do redis.call('HDEL', hkey, o) end
    if #old > 0 then redis.call('ZREMRANGEBYSCORE', zkey, '-inf', cut) end
  end
  if maxCount > 0 then
    local over = redis.call('ZCARD', zkey) - maxCount
    if over > 0 then
      local gone = redis.call('ZPOPMIN', zkey, over)
      for i = 1, #gone, 2 do redis.call('HDEL', hkey, gone[i]) end
    end
  end
end
`

// archive: KEYS inflight, tokens, msgs, count, archive, archived, prio;
// ARGV message ID, token, task ID, at ms, entry, max count, max age ms.
// Settles the delivery like ack (0 on a lost lease, nothing archived) and
// archives the entry. Reject uses it too.
var archiveScript = goredis.NewScript(luaOwns + luaNow + luaArchive + `
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
archive(KEYS[5], KEYS[6], ARGV[3], tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]))
return 1
`)

// requeue: KEYS archive, archived, pending, delayed, msgs, notify, prio,
// ppending, pseq; ARGV task ID, message ID, envelope, due ms (0: now),
// priority. Returns 0, having done nothing, when the task ID is not
// archived.
var requeueScript = goredis.NewScript(luaNow + luaNotify + luaPush + `
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[2], ARGV[3])
local p = tonumber(ARGV[5]) or 0
if p > 0 then redis.call('HSET', KEYS[7], ARGV[2], p) end
local due = tonumber(ARGV[4])
if due > now then
  redis.call('ZADD', KEYS[4], due, ARGV[2])
else
  push(KEYS[3], KEYS[8], KEYS[7], KEYS[9], ARGV[2], false)
end
notify(KEYS[6], 1)
return 1
`)

// archived: KEYS archive, archived; ARGV start, stop (newest first).
// Returns the entries of that page.
var archivedScript = goredis.NewScript(`
local out = {}
for _, id in ipairs(redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2])) do
  local e = redis.call('HGET', KEYS[2], id)
  if e then out[#out + 1] = e end
end
return out
`)

// deleteArchived: KEYS archive, archived; ARGV task IDs. Returns how many
// were archived.
var deleteArchivedScript = goredis.NewScript(`
local n = 0
for _, id in ipairs(ARGV) do
  n = n + redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
end
return n
`)

// migrate: KEYS dead, reasons, msgs, archive, archived. Moves the rejected
// messages an older version kept in K:dead into the archive (attempts
// unknown: 0). Returns how many it moved.
var migrateScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
` + luaNow + luaArchive + `
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
local n = 0
for _, mid in ipairs(ids) do
  local env = redis.call('HGET', KEYS[3], mid)
  local r = redis.call('HGET', KEYS[2], mid) or ''
  local sp = string.find(r, ' ', 1, true)
  local at, reason = now, r
  if sp then
    at = tonumber(string.sub(r, 1, sp - 1)) or now
    reason = string.sub(r, sp + 1)
  end
  if env then
    local nl = string.find(env, '\n', 1, true)
    local id = mid
    if nl then id = string.sub(env, 1, nl - 1) else env = mid .. '\n' .. env end
    local meta = cjson.encode({reason = reason, error = reason, at = at})
    archive(KEYS[4], KEYS[5], id, at, meta .. '\n' .. env, 0, 0)
    redis.call('HDEL', KEYS[3], mid)
    n = n + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return n
`)

// luaPrune drops the workers of KEYS workers, beats whose expiry passed.
const luaPrune = `
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, id in ipairs(gone) do redis.call('HDEL', KEYS[1], id) end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
`

// beat: KEYS workers, beats; ARGV worker ID, data, ttl ms. Prunes the
// expired too, so crashed workers do not pile up when nobody reads Beats.
var beatScript = goredis.NewScript(luaNow + luaPrune + `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
return 1
`)

// beats: KEYS workers, beats. Drops the workers whose ttl ran out and
// returns the data of the others.
var beatsScript = goredis.NewScript(luaNow + luaPrune + `
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local d = redis.call('HGET', KEYS[1], id)
  if d then out[#out + 1] = d end
end
return out
`)

// unbeat: KEYS workers, beats; ARGV worker ID.
var unbeatScript = goredis.NewScript(`
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`)

// purge: KEYS pending, delayed, msgs, count, prio, ppending. Returns how
// many were dropped.
var purgeScript = goredis.NewScript(`
local n = 0
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  n = n + 1
end
for _, key in ipairs({KEYS[2], KEYS[6]}) do
  for _, id in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    n = n + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[6])
return n
`)

// list: KEYS source (list or zset), msgs; ARGV 'list' or 'zset', start,
// stop, '1' to list foreign entries. Returns {envelope, score (empty for a list), ...};
// a foreign entry's envelope is a newline then its text (an empty ID).
var listScript = goredis.NewScript(`
local ids, scores = {}, {}
if ARGV[1] == 'list' then
  ids = redis.call('LRANGE', KEYS[1], ARGV[2], ARGV[3])
else
  local z = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3], 'WITHSCORES')
  for i = 1, #z, 2 do
    ids[#ids + 1] = z[i]
    scores[#scores + 1] = z[i + 1]
  end
end
local out = {}
for i, id in ipairs(ids) do
  local env = redis.call('HGET', KEYS[2], id)
  if not env and ARGV[4] == '1' then env = '\n' .. id end
  if env then
    out[#out + 1] = env
    out[#out + 1] = scores[i] or ''
  end
end
return out
`)

// inflight: KEYS inflight, tokens, msgs; ARGV start, stop. Returns the
// envelopes of that page of the in-flight messages in delivery order (by
// the number their tokens start with).
var inflightScript = goredis.NewScript(`
local all = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local tok = redis.call('HGET', KEYS[2], id) or ''
  local n = string.match(tok, '^(%d+):')
  all[#all + 1] = {id = id, n = tonumber(n) or 0}
end
table.sort(all, function(a, b)
  if a.n ~= b.n then return a.n < b.n end
  return a.id < b.id
end)
local out = {}
local stop = math.min(tonumber(ARGV[2]), #all - 1)
for n = tonumber(ARGV[1]), stop do
  local env = redis.call('HGET', KEYS[3], all[n + 1].id)
  if env then out[#out + 1] = env end
end
return out
`)

// pending: KEYS ppending, pending, msgs, prio; ARGV start, stop (-1: the
// end). Returns {envelope, priority, ...} for that page of the due
// messages in delivery order: priorities 1-255 (K:ppending, highest first)
// then priority 0 (K:pending); a foreign entry's envelope is a newline then
// its text (an empty ID).
var pendingScript = goredis.NewScript(`
local start, stop = tonumber(ARGV[1]), tonumber(ARGV[2])
local zn = redis.call('ZCARD', KEYS[1])
local ids = {}
if stop < 0 then stop = zn + redis.call('LLEN', KEYS[2]) - 1 end
if start < zn then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], start, math.min(stop, zn - 1))) do ids[#ids + 1] = id end
end
if stop >= zn then
  for _, id in ipairs(redis.call('LRANGE', KEYS[2], math.max(start - zn, 0), stop - zn)) do ids[#ids + 1] = id end
end
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = redis.call('HGET', KEYS[3], id) or ('\n' .. id)
  out[#out + 1] = redis.call('HGET', KEYS[4], id) or '0'
end
return out
`)

// find: KEYS msgs, inflight, ppending, pending, delayed, done; ARGV task
// ID. Returns {list, envelope, at ms or ”} for the first message whose
// envelope names the task ID (in flight, pending, scheduled, completed),
// or false.
var findScript = goredis.NewScript(`
local prefix = ARGV[1] .. '\n'
local function named(env)
  return env and string.sub(env, 1, #prefix) == prefix
end
for _, mid in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local env = redis.call('HGET', KEYS[1], mid)
  if named(env) then return {'inflight', env, ''} end
end
for _, mid in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local env = redis.call('HGET', KEYS[1], mid)
  if named(env) then return {'pending', env, ''} end
end
for _, mid in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do
  local env = redis.call('HGET', KEYS[1], mid)
  if named(env) then return {'pending', env, ''} end
end
local d = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
for i = 1, #d, 2 do
  local env = redis.call('HGET', KEYS[1], d[i])
  if named(env) then return {'scheduled', env, d[i + 1]} end
end
for _, e in ipairs(redis.call('LRANGE', KEYS[6], 0, -1)) do
  local nl = string.find(e, '\n', 1, true)
  if nl and named(string.sub(e, nl + 1)) then return {'completed', string.sub(e, nl + 1), string.sub(e, 1, nl - 1)} end
end
return false
`)

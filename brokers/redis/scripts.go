package redisbroker

import (
	"fmt"

	"github.com/errand-go/errand/internal/redisconn"
)

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
//	K:ids       hash  task ID -> message ID, for every message queued
//	                  (pending, scheduled or in flight): Find's index,
//	                  written by publish, requeue and fetch (foreign
//	                  text), removed by ack, archive and purge
//	K:unlisted  string set when Queues takes the queue out of P:queues
//	                  for being empty; the publish script or requeue
//	                  that finds it deletes it and has the queue listed
//	                  again (the publish transaction lists the queue
//	                  itself and leaves it). It also tells KnowsQueue
//	                  that the queue was used
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
//	P:queues    set   every queue published to or fetched from
//	                  (Queues); every publish and fetch adds its queue
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

// How a script reads: it opens with a prologue that names each of its
// KEYS and ARGV (-- KEYS[1] -> K:pending) and binds them to locals named
// after them; the shared snippets below come next, written against those
// locals; then the body. Beside each script, a Go helper (publishKeys, ...)
// builds its KEYS in the prologue's order, so no call site assembles a key
// list of its own; TestScriptPrologues checks that the two agree.

// scripts holds every script of the package with its text, for the test
// of prologues; newScript makes one of its parts: its prologue, the
// snippets it uses, its body. Both are used only while the package
// initialises.
var (
	scripts   redisconn.Scripts
	newScript = scripts.New
)

// luaNow sets now: the server's clock (TIME) in whole ms; t is TIME's
// answer (seconds, microseconds).
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaPush defines, over the locals pending, ppending, prio and pseq of the
// script's prologue:
//
//	priority(id): message id's priority (K:prio; 0 when it has none)
//	push(id, head, p): put message id, of priority p (nil: priority(id)),
//	  on its queue's due messages: on the list K:pending for priority 0
//	  (at its head when head), else on the zset K:ppending, after (before,
//	  when head) the others of its priority
//
// A due message of priority p (1-255) scores (PRIORITY_TOP - p) *
// PRIORITY_BAND + n on K:ppending, n a sequence number (K:pseq), negated
// at the head: highest priority first, then FIFO within a priority.
const luaPush = `
local PRIORITY_TOP, PRIORITY_BAND = 256, 17592186044416 -- 2^44
local function priority(id)
  return tonumber(redis.call('HGET', prio, id) or '0') or 0
end
local function push(id, head, p)
  p = p or priority(id)
  if p <= 0 then
    if head then redis.call('LPUSH', pending, id) else redis.call('RPUSH', pending, id) end
    return
  end
  local n = redis.call('INCR', pseq)
  if head then n = -n end
  redis.call('ZADD', ppending, (PRIORITY_TOP - p) * PRIORITY_BAND + n, id)
end
`

// Wake-up tokens on a queue's K:notify, on which idle fetchers block.
const (
	wakeBurst = 64  // the most tokens one script (one publish) pushes
	wakeKeep  = 256 // the most tokens K:notify keeps
)

// luaEnqueue is "due later, or push and wake", written once for every
// script that queues a message (publish, release, requeue). After luaNow
// and over the locals delayed and notify as well as luaPush's, it defines
// push and priority (luaPush) and:
//
//	enqueue(id, due, p): message id (priority p; nil: look it up) waits
//	  on K:delayed when due (ms) is later than now, else joins the due
//	  messages (push)
//	wake(n): n messages were queued: push a wake-up token for each, at
//	  most WAKE_BURST, keeping at most WAKE_KEEP on K:notify
var luaEnqueue = luaPush + fmt.Sprintf(`
local WAKE_BURST, WAKE_KEEP = %d, %d
local function enqueue(id, due, p)
  if due > now then redis.call('ZADD', delayed, due, id) else push(id, false, p) end
end
local function wake(n)
  for i = 1, math.min(n, WAKE_BURST) do redis.call('LPUSH', notify, '1') end
  redis.call('LTRIM', notify, 0, WAKE_KEEP - 1)
end
`, wakeBurst, wakeKeep)

// publishScript stores and queues messages of one queue (enqueue: due
// later, or due now by priority), then wakes as many blocked fetchers.
// Returns how many it stored.
var publishScript = newScript(`
-- publish
-- KEYS[1] -> K:pending
-- KEYS[2] -> K:delayed
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:notify
-- KEYS[5] -> K:prio
-- KEYS[6] -> K:ppending
-- KEYS[7] -> K:pseq
-- KEYS[8] -> K:ids
-- KEYS[9] -> K:unlisted
-- ARGV[4i-3] -> message ID of message i (i = 1, 2, ...; messageID)
-- ARGV[4i-2] -> its envelope (task ID, newline, body)
-- ARGV[4i-1] -> when it is due (ms; 0: now)
-- ARGV[4i]   -> its priority (0-255)
local pending, delayed, msgs, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prio, ppending, pseq, ids, unlisted = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
`, luaNow, luaEnqueue, `
local n = 0
for i = 1, #ARGV, 4 do
  local id, env, due, p = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  redis.call('HSET', msgs, id, env)
  redis.call('HSET', ids, string.match(env, '^([^\n]*)\n'), id)
  if p > 0 then redis.call('HSET', prio, id, p) end
  enqueue(id, due, p)
  n = n + 1
end
wake(n)
return {n, redis.call('DEL', unlisted)}
`)

func (k keys) publishKeys() []string {
	return []string{k.pending, k.delayed, k.msgs, k.notify, k.prio, k.ppending, k.pseq, k.ids, k.unlisted}
}

// promoteBatch is the most delayed messages that came due, and the most
// expired leases, one fetch moves to the due messages (fetchScript's
// ARGV[3]); the next fetch moves more.
const promoteBatch = 1000

// fetchReply is the length of one delivery in fetchScript's reply: message
// ID, envelope, lease token, deliveries so far, priority, whether it
// began the task's attempt (notTried, startWritten, startRefused), the
// task's state before (false: none, or not tried), the attempt and name
// it started ("attempt\nname"; false: not tried). The server's time (µs:
// the time of the starts) follows the last delivery.
const fetchReply = 8

// What fetchScript answers for a delivery's start (luaStart's begin).
const (
	notTried     = 0
	startWritten = 1
	startRefused = 2
)

// luaMany defines many(cmd, key, list, step): run cmd on key with the
// arguments of list, MANY_ARGS of them (a multiple of step, 1 if nil) to
// a command, so that no call unpacks more than Lua's stack holds; returns
// the replies' elements joined (HMGET: one per field, false for none),
// not to be modified: a list that fits one command gets that command's
// reply as it is (or a shared empty table), not a copy.
const luaMany = `
local MANY_ARGS, NO_REPLY = 1000, {}
local function many(cmd, key, list, step)
  local out, n = {}, #list
  local chunk = MANY_ARGS * (step or 1)
  if n == 0 then return NO_REPLY end
  if n <= chunk then
    local r = redis.call(cmd, key, unpack(list))
    if type(r) == 'table' then return r end
    return NO_REPLY
  end
  for i = 1, n, chunk do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + chunk - 1, n)))
    if type(r) == 'table' then
      for j = 1, #r do out[#out + 1] = r[j] end
    end
  end
  return out
end
`

// luaStart defines, after luaNow and over the locals statePrefix, expiry,
// expiryArg (expiry as given) and startable of fetchScript's prologue:
//
//	begin(id, taskID, first): begin the attempt of task taskID, whose
//	  message id names its attempt and task (messageID; first: its first
//	  delivery), by driver.Starter's table on the backend's state at
//	  statePrefix..taskID: NOT_TRIED (id names no task, or one not
//	  startable), else START_WRITTEN or START_REFUSED, the state before
//	  (false: none), and the attempt and name it started ("attempt\nname")
//
// The backend's state is Go's encoding of driver.TaskState, whose first
// fields are task_uuid, task_name, state and attempt in that order, with
// created_at followed only by the times: peek reads them with anchored
// patterns and plain searches, not cjson (and compares attempts as
// digits, not numbers: tonumber costs more than the rest of a start); a state of another layout (a name with escapes, another
// writer) is decoded with cjson. STARTED is written from the task's UUID,
// name (both in a message ID only when JSON keeps them as they are:
// messageID), state and attempt, with prev's created_at (else now) and
// started_at now to the microsecond (TIME's t), or prev's created_at when
// that is later (notBefore: the producer's clock may be ahead of Redis's).
var luaStart = redisconn.LuaNotBefore + fmt.Sprintf(`
local NOT_TRIED, START_WRITTEN, START_REFUSED = %d, %d, %d
local function rfc3339(s, us)
  local days = math.floor(s / 86400)
  local secs = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return string.format('"%%04d-%%02d-%%02dT%%02d:%%02d:%%02d.%%06dZ"', y, m, d, math.floor(secs / 3600),
    math.floor(secs %% 3600 / 60), secs %% 60, us)
end
local nowJSON -- rfc3339 of TIME (t), made by the first begin that needs it
local function peek(raw)
  local _, e, name = string.find(raw, '^{"task_uuid":"[^"\\]*","task_name":"([^"\\]*)"')
  if not e then return nil end
  local st, after = string.match(raw, '^,"state":"(%%u*)"()', e + 1)
  if not st then return nil end
  local att = string.match(raw, '^,"attempt":0*(%%d+)', after) or '0'
  -- The first "created_at": followed by a string and then no object or
  -- array up to the closing brace (the times alone), found by plain
  -- searches rather than a pattern tried at every position. None such (a
  -- progress object or array after the times): cjson reads the state.
  local from = after
  while true do
    local _, ce = string.find(raw, '"created_at":"', from, true)
    if not ce then return nil end
    local q = string.find(raw, '"', ce + 1, true)
    if not q then return name, st, att, nil end
    if string.find(raw, '^[^{}%%[%%]]*}$', q + 1) then return name, st, att, string.sub(raw, ce, q) end
    from = ce
  end
end
local function begin(id, taskID, first)
  local a, name = string.match(id, '^%%x+:(%%d+):(.+)$')
  if not a or not string.find(startable, '\n' .. name .. '\n', 1, true) then return NOT_TRIED, false, false end
  local key = statePrefix .. taskID
  -- A state the script cannot read (a key of another type, not JSON, not
  -- an object) is left to Start: an error here would end the script with
  -- the messages it popped after this one on no list, lost.
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then return NOT_TRIED, false, false end
  nowJSON = nowJSON or rfc3339(tonumber(t[1]), tonumber(t[2]))
  local created, started = nowJSON, nowJSON
  if raw then
    local pname, st, patt, pcreated = peek(raw)
    local later -- the state's attempt is later than a
    if pname then
      -- Both digits with no leading zero: compared as strings, not
      -- through tonumber.
      later = #patt > #a or (#patt == #a and patt > a)
    else
      local ok, p = pcall(cjson.decode, raw)
      if not ok or type(p) ~= 'table' then return NOT_TRIED, false, false end
      pname, st, later = p.task_name, p.state, (tonumber(p.attempt) or 0) > tonumber(a)
      if type(pname) ~= 'string' then pname = '' end
      if type(p.created_at) == 'string' then pcreated = cjson.encode(p.created_at) end
    end
    local refused = (pname ~= '' and pname ~= name) or st == 'SUCCESS' or st == 'FAILURE' or st == 'CANCELLED' or later or
      (st == 'STARTED' and first)
    if refused then return START_REFUSED, raw, a .. '\n' .. name end
    if pcreated then created, started = pcreated, notBefore(nowJSON, pcreated) end
  end
  local v = '{"task_uuid":"' .. taskID .. '","task_name":"' .. name .. '","state":"STARTED","attempt":' .. a ..
    ',"created_at":' .. created .. ',"started_at":' .. started .. '}'
  if expiry > 0 then redis.call('SET', key, v, 'PX', expiryArg) else redis.call('SET', key, v) end
  return START_WRITTEN, raw or false, a .. '\n' .. name
end
`, notTried, startWritten, startRefused)

// fetchScript moves the delayed messages that came due and the messages
// whose lease ran out (at the head of their priority) to the due
// messages, then leases up to ARGV[1] of them: priority 1-255 first
// (K:ppending), highest first; then priority 0 (K:pending). A message
// whose body is over ARGV[5] bytes (the broker's MaxPayload) is not
// leased: it goes to the archive with a reason naming its size and the
// bound (setAside), so that no reply carries a body larger than the bound
// (a reply too large to read before the client's read timeout would leave
// the lease orphaned, again and again). The entry keeps the body's size
// and its first ArchivePreview bytes only: the script never writes a copy
// of an oversized body, which would hold the server for every other
// client as long as the copy takes (seconds for hundreds of MB). Returns
// {message ID, envelope, token, deliveries, priority, ...}, or, when none
// is due, {'wait', next wake (ms; -1: none), now (ms)}: the next wake is
// the earliest due time or lease deadline, or now when it set aside as
// many as ARGV[3] and more may be due.
var fetchScript = newScript(`
-- fetch
-- KEYS[1]  -> K:pending
-- KEYS[2]  -> K:delayed
-- KEYS[3]  -> K:inflight
-- KEYS[4]  -> K:msgs
-- KEYS[5]  -> K:tokens
-- KEYS[6]  -> K:count
-- KEYS[7]  -> K:seq
-- KEYS[8]  -> K:prio
-- KEYS[9]  -> K:ppending
-- KEYS[10] -> K:pseq
-- KEYS[11] -> K:archive
-- KEYS[12] -> K:archived
-- KEYS[13] -> K:ids
-- ARGV[1] -> the most messages to lease
-- ARGV[2] -> lease (ms)
-- ARGV[3] -> the most delayed messages, expired leases and oversized
--            messages to move in one fetch
-- ARGV[4] -> this fetch's random token (starts its lease tokens)
-- ARGV[5] -> the largest body to deliver (bytes; 0: no bound)
-- ARGV[6] -> the most archive entries to keep (0: no bound)
-- ARGV[7] -> how long to keep an archive entry (ms; 0: no bound)
-- ARGV[8] -> the result backend's task key prefix, to start the tasks
--            of what it leases (a carried fetch); '': start nothing
-- ARGV[9] -> the backend's result expiry (ms; 0: none)
-- ARGV[10] -> the task names it may start, each between newlines
--            ('\nA\nB\n'; absent: none)
local pending, delayed, inflight, msgs, tokens = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local count, seq, prio, ppending, pseq = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local archive, archived, ids = KEYS[11], KEYS[12], KEYS[13]
local want, lease, batch, random = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local maxPayload, maxCount, maxAge = tonumber(ARGV[5]), ARGV[6], ARGV[7] -- the bounds: numbers in setAside
local statePrefix, expiry, expiryArg = ARGV[8], tonumber(ARGV[9]), ARGV[9]
local startable = ARGV[10] or ''
`, luaNow, luaMany, luaPush, luaForget, luaArchive, luaStart, fmt.Sprintf(`
local ARCHIVE_PREVIEW, ID_MAX = %d, %d
`, ArchivePreview, maxMessageID), `
-- The earliest delayed message and lease deadline (ZRANGE ... WITHSCORES;
-- nil once the zset has changed): a scan runs only when its zset has
-- something due, and a fetch that finds nothing answers the next wake
-- from them without asking again.
local dhead = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if #dhead > 0 and tonumber(dhead[2]) <= now then
  dhead = nil
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, batch)
  for _, id in ipairs(due) do
    redis.call('ZREM', delayed, id)
    push(id, false)
  end
end
local lhead = redis.call('ZRANGE', inflight, 0, 0, 'WITHSCORES')
if #lhead > 0 and tonumber(lhead[2]) <= now then
  lhead = nil
  local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, batch)
  for i = #expired, 1, -1 do
    local id = expired[i]
    redis.call('ZREM', inflight, id)
    redis.call('HDEL', tokens, id)
    push(id, true)
  end
end
-- setAside archives message id (task ID taskID, body of size bytes
-- whose first ARCHIVE_PREVIEW bytes or more are head, priority p) instead
-- of leasing it: the entry keeps the size and the first ARCHIVE_PREVIEW
-- bytes, never a copy of the whole body. A foreign text (foreignText) was
-- never stored: nothing to forget.
local function setAside(id, taskID, head, size, p, foreignText)
  local reason = string.format('message body of %d bytes is over the broker\'s MaxPayload of %d bytes: set aside by fetch, never delivered', size, maxPayload)
  local n = 0
  if not foreignText then n = tonumber(redis.call('HGET', count, id) or '0') or 0 end
  local meta = '{"reason":' .. cjson.encode(reason) .. ',"error":' .. cjson.encode(reason) ..
    ',"attempts":' .. n .. ',"at":' .. string.format('%d', now) .. ',"size":' .. string.format('%d', size)
  if p > 0 then meta = meta .. ',"priority":' .. p end
  if not foreignText then forget(id, taskID) end
  keepArchived(taskID, now, meta .. '}\n' .. taskID .. '\n' .. string.sub(head, 1, ARCHIVE_PREVIEW),
    tonumber(maxCount), tonumber(maxAge))
end
local out, leased, aside, foreign, seen = {}, 0, 0, 0, {}
local deadline = string.format('%d', now + lease) -- once, not per ZADD argument
while leased < want and aside < batch do
  local got, prios = {}, {}
  local z = redis.call('ZPOPMIN', ppending, want - leased)
  for i = 1, #z, 2 do
    got[#got + 1] = z[i]
    prios[#got] = PRIORITY_TOP - math.floor(tonumber(z[i + 1]) / PRIORITY_BAND + 0.5)
  end
  if #got < want - leased then
    local l = redis.call('LPOP', pending, want - leased - #got)
    if l then
      for _, id in ipairs(l) do got[#got + 1] = id end
    end
  end
  if #got == 0 then break end
  -- One HMGET reads the round's envelopes (false: none, foreign text).
  -- An entry longer than any message ID (ID_MAX) is foreign text, not
  -- looked up: the lookup would copy and hash all of it.
  local look, long = got, false
  for _, id in ipairs(got) do
    if #id > ID_MAX then long = true end
  end
  if long then
    look = {}
    for i, id in ipairs(got) do
      if #id > ID_MAX then look[i] = '' else look[i] = id end
    end
  end
  local envs = many('HMGET', msgs, look)
  local lids, lenvs, lps = {}, {}, {}
  for i, id in ipairs(got) do
    local p = prios[i] or 0
    local env = envs[i]
    if #id > ID_MAX then env = false end
    if env then
      if maxPayload > 0 then
        local nl = string.find(env, '\n', 1, true) or 0
        if #env - nl > maxPayload then
          local taskID = id
          if nl > 0 then taskID = string.sub(env, 1, nl - 1) end
          setAside(id, taskID, string.sub(env, nl + 1, nl + ARCHIVE_PREVIEW), #env - nl, p, false)
          aside = aside + 1
          env = false
        end
      end
    else
      -- Foreign: text put on the list by something other than errand, with
      -- no stored envelope. Never dropped: it gets an ID and an envelope
      -- whose body is the text itself, and is handed out like any message
      -- (a worker that cannot decode it rejects it into the archive), or
      -- set aside when the text is over the bound.
      local raw = id
      foreign = foreign + 1
      id = random .. ':f' .. foreign
      if maxPayload > 0 and #raw > maxPayload then
        setAside(id, id, raw, #raw, 0, true)
        aside = aside + 1
        env = false
      else
        env = id .. '\n' .. raw
        redis.call('HSET', msgs, id, env)
        redis.call('HSET', ids, id, id)
      end
    end
    -- A message on the due lists twice is leased once.
    if env and not seen[id] then
      seen[id] = true
      local k = #lids + 1
      lids[k], lenvs[k], lps[k] = id, env, p
    end
  end
  if #lids > 0 then
    -- The round's leases in one command per key: deliveries so far
    -- (HMGET, then HSET), tokens numbered from one INCRBY (the token
    -- starts with the delivery's number, so List can give the in-flight
    -- messages in delivery order), the deadlines (ZADD).
    local counts = many('HMGET', count, lids)
    local base = redis.call('INCRBY', seq, #lids) - #lids
    local zargs, targs, cargs = {}, {}, {}
    for i, id in ipairs(lids) do
      local env = lenvs[i]
      local tok = (base + i) .. ':' .. random
      local n = (tonumber(counts[i]) or 0) + 1
      zargs[2 * i - 1], zargs[2 * i] = deadline, id
      targs[2 * i - 1], targs[2 * i] = id, tok
      cargs[2 * i - 1], cargs[2 * i] = id, n
      local began, prev, as = NOT_TRIED, false, false
      if statePrefix ~= '' then
        local nl = string.find(env, '\n', 1, true)
        if nl then began, prev, as = begin(id, string.sub(env, 1, nl - 1), n == 1) end
      end
      out[#out + 1] = id
      out[#out + 1] = env
      out[#out + 1] = tok
      out[#out + 1] = n
      out[#out + 1] = lps[i]
      out[#out + 1] = began
      out[#out + 1] = prev
      out[#out + 1] = as
      leased = leased + 1
    end
    many('ZADD', inflight, zargs, 2)
    many('HSET', tokens, targs, 2)
    many('HSET', count, cargs, 2)
  end
end
if #out > 0 then
  out[#out + 1] = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- TIME in µs: the starts' time
  return out
end
if aside >= batch then return {'wait', now, now} end
-- Setting aside (forget) may have taken a lease off K:inflight.
if aside > 0 then lhead = nil end
local nextAt = -1
local d = dhead or redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if #d > 0 then nextAt = tonumber(d[2]) end
local l = lhead or redis.call('ZRANGE', inflight, 0, 0, 'WITHSCORES')
if #l > 0 and (nextAt < 0 or tonumber(l[2]) < nextAt) then nextAt = tonumber(l[2]) end
return {'wait', nextAt, now}
`)

func (k keys) fetchKeys() []string {
	return []string{k.pending, k.delayed, k.inflight, k.msgs, k.tokens, k.count, k.seq, k.prio, k.ppending, k.pseq,
		k.archive, k.archived, k.ids}
}

// What the settling scripts answer for a delivery: ack per delivery;
// release, extend and archive for their one.
const (
	leaseLost = 0 // its token is not the message's current one: nothing done
	settled   = 1
	// ackCancelled: ackStatesScript acked the delivery and did not write
	// its state over its task's CANCELLED.
	ackCancelled = 2
)

// luaSettled names the settling answers in Lua.
var luaSettled = fmt.Sprintf(`
local SETTLED, LEASE_LOST = %d, %d
`, settled, leaseLost)

// luaOwns returns LEASE_LOST unless token is the current lease token of
// message id (K:tokens): the locals tokens, id and token of the script's
// prologue.
var luaOwns = luaSettled + `
if redis.call('HGET', tokens, id) ~= token then return LEASE_LOST end
`

// luaForget defines forget(id, taskID): delete message id and its
// delivery (its priority, lease, token, envelope and count of
// deliveries) and its entry in Find's index when the entry names it,
// over the locals prio, inflight, tokens, msgs, count and ids of the
// script's prologue. taskID nil: read it from the envelope.
const luaForget = `
local function forget(id, taskID)
  if not taskID then
    local env = redis.call('HGET', msgs, id)
    if env then taskID = string.match(env, '^([^\n]*)\n') end
  end
  if taskID and redis.call('HGET', ids, taskID) == id then redis.call('HDEL', ids, taskID) end
  redis.call('HDEL', prio, id)
  redis.call('ZREM', inflight, id)
  redis.call('HDEL', tokens, id)
  redis.call('HDEL', msgs, id)
  redis.call('HDEL', count, id)
end
`

// luaAck defines, after luaSettled and luaMany and over the locals
// inflight, tokens, msgs, count, prio, ids, done, acked and keep of the
// script's prologue:
//
//	ackAll(list, tokens, prioritized): ack each message list[i] whose
//	  current lease token is tokens[i] (forget it, keep its envelope on
//	  K:done), with one command per key for the whole batch; count the
//	  acks in K:acked and trim K:done. Returns SETTLED or LEASE_LOST per
//	  delivery (a message named twice is acked once: LEASE_LOST the
//	  second time)
//
// It forgets as luaForget does, batched: the message's priority (unless
// prioritized is false: the caller knows none of them has one), lease,
// token, envelope and count of deliveries, and its entry in Find's index
// when the entry names it. K:done's entries start with the server's clock
// (TIME) in whole ms, read only when it keeps any, and written from
// TIME's strings (seconds, then the microseconds' first three of six
// digits), not through a number.
const luaAck = `
local function ackAll(list, toks, prioritized)
  local out, owned, seen = {}, {}, {}
  local cur = many('HMGET', tokens, list)
  for i, id in ipairs(list) do
    if cur[i] == toks[i] and not seen[id] then
      seen[id] = true
      owned[#owned + 1] = id
      out[i] = SETTLED
    else
      out[i] = LEASE_LOST
    end
  end
  if #owned == 0 then return out end
  local envs = many('HMGET', msgs, owned)
  local tids, tmsg, kept = {}, {}, {}
  local stamp
  if keep > 0 then
    local t = redis.call('TIME')
    stamp = t[1] .. string.sub('00000' .. t[2], -6, -4) .. '\n'
  end
  for i, id in ipairs(owned) do
    local env = envs[i]
    if env then
      local nl = string.find(env, '\n', 1, true)
      if nl then
        tids[#tids + 1] = string.sub(env, 1, nl - 1)
        tmsg[#tids] = id
      end
      if keep > 0 then kept[#kept + 1] = stamp .. env end
    end
  end
  if #tids > 0 then
    local cur = many('HMGET', ids, tids)
    local drop = {}
    for i, tid in ipairs(tids) do
      if cur[i] == tmsg[i] then drop[#drop + 1] = tid end
    end
    if #drop > 0 then many('HDEL', ids, drop) end
  end
  if prioritized then many('HDEL', prio, owned) end
  many('ZREM', inflight, owned)
  many('HDEL', tokens, owned)
  many('HDEL', msgs, owned)
  many('HDEL', count, owned)
  if #kept > 0 then
    many('LPUSH', done, kept)
    redis.call('LTRIM', done, 0, keep - 1)
  end
  redis.call('INCRBY', acked, #owned)
  return out
end
`

// ackScript acks each delivery whose token is current (one Ack call's
// batch, up to MaxAckBatch), keeping its envelope in K:done and counting it
// in K:acked in the same step. Returns one SETTLED or LEASE_LOST per
// delivery.
var ackScript = newScript(`
-- ack
-- KEYS[1] -> K:inflight
-- KEYS[2] -> K:tokens
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:count
-- KEYS[5] -> K:done
-- KEYS[6] -> K:acked
-- KEYS[7] -> K:prio
-- KEYS[8] -> K:ids
-- ARGV[1]    -> how many acked messages K:done keeps (0: none)
-- ARGV[2i]   -> message ID of delivery i (i = 1, 2, ...)
-- ARGV[2i+1] -> its lease token
local inflight, tokens, msgs, count, done, acked, prio = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local ids = KEYS[8]
local keep = tonumber(ARGV[1])
`, luaSettled, luaMany, luaAck, `
local list, toks = {}, {}
for i = 2, #ARGV - 1, 2 do
  list[#list + 1] = ARGV[i]
  toks[#toks + 1] = ARGV[i + 1]
end
return ackAll(list, toks, true)
`)

// ackStatesScript is ackScript that first writes each delivery's task
// state, a result backend's key on the same Redis node
// (driver.Colocation.Settle): SET ... PX of the state,
// whether or not the lease is current (as the backend's SetStates before
// an Ack would), then the ack. A state is not written over its task's
// CANCELLED (a cancel is never overwritten, driver.Canceller), and its
// delivery is acked all the same: each state is written with SET ...
// GET (Redis 6.2, as the fetch's LPOP with a count), whose reply is the
// state it replaced, and a CANCELLED one is put back at once, in the
// same script — no reader sees the SUCCESS, and the common case costs
// no command more than the plain SET did.
// The state keys follow the queue's keys in KEYS, one per delivery.
// Returns one SETTLED, LEASE_LOST or CANCELLED (acked, its state not
// written) per delivery.
var ackStatesScript = newScript(`
-- ackStates
-- KEYS[1] -> K:inflight
-- KEYS[2] -> K:tokens
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:count
-- KEYS[5] -> K:done
-- KEYS[6] -> K:acked
-- KEYS[7] -> K:prio
-- KEYS[8] -> K:ids
-- KEYS[8+i]  -> the backend's state key of delivery i (i = 1, 2, ...)
-- ARGV[1]    -> how many acked messages K:done keeps (0: none)
-- ARGV[2]    -> the states' expiry (ms; 0: none)
-- ARGV[3]    -> '0' when no delivery has a priority (nothing in K:prio), else '1'
-- ARGV[3i+1] -> message ID of delivery i (i = 1, 2, ...)
-- ARGV[3i+2] -> its lease token
-- ARGV[3i+3] -> its task's state, as the backend encodes it
local inflight, tokens, msgs, count, done, acked, prio = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local ids = KEYS[8]
local states = {unpack(KEYS, 9)}
local keep, expiry, prioritized = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] ~= '0'
`, luaSettled, luaMany, luaAck, redisconn.LuaCancelled, fmt.Sprintf(`
local CANCELLED = %d
`, ackCancelled), `
local function set(key, v)
  if expiry > 0 then return redis.pcall('SET', key, v, 'PX', ARGV[2], 'GET') end
  return redis.pcall('SET', key, v, 'GET')
end
local list, toks, refused = {}, {}, {}
for i, state in ipairs(states) do
  local a = 3 * i
  local prev = set(state, ARGV[a + 3])
  if type(prev) == 'table' and prev.err then
    -- Not a string (no state of errand's): written over, as a plain SET does.
    redis.call('DEL', state)
    set(state, ARGV[a + 3])
  elseif cancelled(prev) then
    set(state, prev) -- the cancel stays (its expiry restarts)
    refused[#refused + 1] = i
  end
  list[i], toks[i] = ARGV[a + 1], ARGV[a + 2]
end
local out = ackAll(list, toks, prioritized)
for _, i in ipairs(refused) do
  if out[i] == SETTLED then out[i] = CANCELLED end
end
return out
`)

// ackStatesKeys are ackStatesScript's KEYS: the queue's, then states.
func (k keys) ackStatesKeys(states []string) []string {
	return append(k.ackKeys(), states...)
}

func (k keys) ackKeys() []string {
	return []string{k.inflight, k.tokens, k.msgs, k.count, k.done, k.acked, k.prio, k.ids}
}

// releaseScript ends the delivery and queues its message again
// (enqueue: due later, or due now at the tail of its priority), then
// wakes a blocked fetcher. Returns SETTLED or LEASE_LOST.
var releaseScript = newScript(`
-- release
-- KEYS[1] -> K:inflight
-- KEYS[2] -> K:tokens
-- KEYS[3] -> K:pending
-- KEYS[4] -> K:delayed
-- KEYS[5] -> K:notify
-- KEYS[6] -> K:prio
-- KEYS[7] -> K:ppending
-- KEYS[8] -> K:pseq
-- ARGV[1] -> message ID
-- ARGV[2] -> lease token
-- ARGV[3] -> when it is due again (ms; 0: now)
local inflight, tokens, pending, delayed, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prio, ppending, pseq = KEYS[6], KEYS[7], KEYS[8]
local id, token, due = ARGV[1], ARGV[2], tonumber(ARGV[3])
`, luaOwns, luaNow, luaEnqueue, `
redis.call('ZREM', inflight, id)
redis.call('HDEL', tokens, id)
enqueue(id, due)
wake(1)
return SETTLED
`)

func (k keys) releaseKeys() []string {
	return []string{k.inflight, k.tokens, k.pending, k.delayed, k.notify, k.prio, k.ppending, k.pseq}
}

// extendScript moves the delivery's lease deadline to now + lease.
// Returns SETTLED or LEASE_LOST.
var extendScript = newScript(`
-- extend
-- KEYS[1] -> K:inflight
-- KEYS[2] -> K:tokens
-- ARGV[1] -> message ID
-- ARGV[2] -> lease token
-- ARGV[3] -> lease (ms)
local inflight, tokens = KEYS[1], KEYS[2]
local id, token, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
`, luaOwns, luaNow, `
redis.call('ZADD', inflight, 'XX', now + lease, id)
return SETTLED
`)

func (k keys) extendKeys() []string { return []string{k.inflight, k.tokens} }

// luaArchive defines keepArchived(taskID, at, entry, maxCount, maxAge),
// over luaNow and the locals archive and archived of the script's
// prologue: keep entry as the task's archive entry (replacing any),
// ordered by at (ms; ties in archive order, up to ARCHIVE_TIES of them),
// then drop the entries beyond maxCount (oldest first) and those archived
// more than maxAge ms ago (0: no bound). trimArchive(maxCount, maxAge)
// does the dropping alone.
const luaArchive = `
local ARCHIVE_TIES = 1000 -- K:archive scores: ms * ARCHIVE_TIES + tie-breaker
local function trimArchive(maxCount, maxAge)
  if maxAge > 0 then
    local cut = string.format('(%.0f', (now - maxAge) * ARCHIVE_TIES)
    local old = redis.call('ZRANGEBYSCORE', archive, '-inf', cut)
    for _, o in ipairs(old) do redis.call('HDEL', archived, o) end
    if #old > 0 then redis.call('ZREMRANGEBYSCORE', archive, '-inf', cut) end
  end
  if maxCount > 0 then
    local over = redis.call('ZCARD', archive) - maxCount
    if over > 0 then
      local gone = redis.call('ZPOPMIN', archive, over)
      for i = 1, #gone, 2 do redis.call('HDEL', archived, gone[i]) end
    end
  end
end
local function keepArchived(taskID, at, entry, maxCount, maxAge)
  redis.call('ZREM', archive, taskID)
  local base = at * ARCHIVE_TIES
  local tie = redis.call('ZCOUNT', archive, base, base + ARCHIVE_TIES - 1)
  redis.call('ZADD', archive, base + math.min(tie, ARCHIVE_TIES - 1), taskID)
  redis.call('HSET', archived, taskID, entry)
  trimArchive(maxCount, maxAge)
end
`

// archiveScript ends the delivery as ack does (without K:done) and keeps
// the entry in the archive. Reject uses it too. Returns SETTLED, or
// LEASE_LOST having archived nothing.
var archiveScript = newScript(`
-- archive
-- KEYS[1] -> K:inflight
-- KEYS[2] -> K:tokens
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:count
-- KEYS[5] -> K:archive
-- KEYS[6] -> K:archived
-- KEYS[7] -> K:prio
-- KEYS[8] -> K:ids
-- ARGV[1] -> message ID
-- ARGV[2] -> lease token
-- ARGV[3] -> task ID
-- ARGV[4] -> archive time (ms)
-- ARGV[5] -> archive entry
-- ARGV[6] -> the most entries to keep (0: no bound)
-- ARGV[7] -> how long to keep an entry (ms; 0: no bound)
local inflight, tokens, msgs, count, archive, archived, prio = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local ids = KEYS[8]
local id, token, taskID, at, entry = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local maxCount, maxAge = tonumber(ARGV[6]), tonumber(ARGV[7])
`, luaOwns, luaNow, luaForget, luaArchive, `
forget(id)
keepArchived(taskID, at, entry, maxCount, maxAge)
return SETTLED
`)

func (k keys) archiveKeys() []string {
	return []string{k.inflight, k.tokens, k.msgs, k.count, k.archive, k.archived, k.prio, k.ids}
}

// notArchived is requeueScript's answer when the task ID is not archived.
const notArchived = 0

// requeueScript takes the task out of the archive and queues its message
// under a fresh message ID (enqueue: due later, or due now by priority),
// then wakes a blocked fetcher. Returns 1, or NOT_ARCHIVED having done
// nothing.
var requeueScript = newScript(`
-- requeue
-- KEYS[1] -> K:archive
-- KEYS[2] -> K:archived
-- KEYS[3] -> K:pending
-- KEYS[4] -> K:delayed
-- KEYS[5] -> K:msgs
-- KEYS[6] -> K:notify
-- KEYS[7] -> K:prio
-- KEYS[8] -> K:ppending
-- KEYS[9] -> K:pseq
-- KEYS[10] -> K:ids
-- KEYS[11] -> K:unlisted
-- ARGV[1] -> task ID
-- ARGV[2] -> the message's new ID
-- ARGV[3] -> its envelope
-- ARGV[4] -> when it is due (ms; 0: now)
-- ARGV[5] -> its priority (0-255)
local archive, archived, pending, delayed, msgs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local notify, prio, ppending, pseq, ids, unlisted = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local taskID, id, env, due, p = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]) or 0
`, luaNow, luaEnqueue, fmt.Sprintf(`
local NOT_ARCHIVED = %d
`, notArchived), `
if redis.call('HDEL', archived, taskID) == 0 then return NOT_ARCHIVED end
redis.call('ZREM', archive, taskID)
redis.call('HSET', msgs, id, env)
redis.call('HSET', ids, string.match(env, '^([^\n]*)\n'), id)
redis.call('DEL', unlisted)
if p > 0 then redis.call('HSET', prio, id, p) end
enqueue(id, due, p)
wake(1)
return 1
`)

func (k keys) requeueKeys() []string {
	return []string{k.archive, k.archived, k.pending, k.delayed, k.msgs, k.notify, k.prio, k.ppending, k.pseq, k.ids, k.unlisted}
}

// archivedScript returns the entries of one page of the archive, newest
// first: two strings per entry, an empty string and the entry, or, for an
// entry longer than ARGV[3] bytes (not read: the copy would hold the
// server as long as it takes), its task ID and its length.
var archivedScript = newScript(`
-- archived
-- KEYS[1] -> K:archive
-- KEYS[2] -> K:archived
-- ARGV[1] -> first index of the page (0: the newest)
-- ARGV[2] -> last index (-1: the oldest)
-- ARGV[3] -> the longest entry to read (bytes)
local archive, archived = KEYS[1], KEYS[2]
local start, stop, longest = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {}
for _, id in ipairs(redis.call('ZREVRANGE', archive, start, stop)) do
  local n = redis.call('HSTRLEN', archived, id)
  if n > longest then
    out[#out + 1] = id
    out[#out + 1] = tostring(n)
  elseif n > 0 then
    out[#out + 1] = ''
    out[#out + 1] = redis.call('HGET', archived, id)
  end
end
return out
`)

func (k keys) archivedKeys() []string { return []string{k.archive, k.archived} }

// deleteArchivedScript drops tasks from the archive. Returns how many of
// them were archived.
var deleteArchivedScript = newScript(`
-- deleteArchived
-- KEYS[1] -> K:archive
-- KEYS[2] -> K:archived
-- ARGV[i] -> task ID (i = 1, 2, ...)
local archive, archived = KEYS[1], KEYS[2]
local n = 0
for _, id in ipairs(ARGV) do
  n = n + redis.call('HDEL', archived, id)
  redis.call('ZREM', archive, id)
end
return n
`)

func (k keys) deleteArchivedKeys() []string { return []string{k.archive, k.archived} }

// migrateScript moves the rejected messages an older version kept in
// K:dead into the archive (attempts unknown: 0), at once when K:dead does
// not exist. Returns how many it moved.
var migrateScript = newScript(`
-- migrate
-- KEYS[1] -> K:dead
-- KEYS[2] -> K:reasons
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:archive
-- KEYS[5] -> K:archived
-- KEYS[6] -> K:ids
local dead, reasons, msgs, archive, archived, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
if redis.call('EXISTS', dead) == 0 then return 0 end
`, luaNow, luaArchive, `
local ids = redis.call('LRANGE', dead, 0, -1)
local n = 0
for _, mid in ipairs(ids) do
  local env = redis.call('HGET', msgs, mid)
  local r = redis.call('HGET', reasons, mid) or ''
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
    keepArchived(id, at, meta .. '\n' .. env, 0, 0)
    redis.call('HDEL', msgs, mid)
    if redis.call('HGET', index, id) == mid then redis.call('HDEL', index, id) end
    n = n + 1
  end
end
redis.call('DEL', dead, reasons)
return n
`)

func (k keys) migrateKeys() []string {
	return []string{k.dead, k.reasons, k.msgs, k.archive, k.archived, k.ids}
}

// luaPrune drops the workers whose expiry passed, over luaNow and the
// locals workers and beats of the script's prologue.
const luaPrune = `
local gone = redis.call('ZRANGEBYSCORE', beats, '-inf', now)
for _, id in ipairs(gone) do redis.call('HDEL', workers, id) end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', beats, '-inf', now) end
`

// beatScript stores a worker's heartbeat with its expiry. It prunes the
// expired too, so crashed workers do not pile up when nobody reads Beats.
var beatScript = newScript(`
-- beat
-- KEYS[1] -> P:workers
-- KEYS[2] -> P:beats
-- ARGV[1] -> worker ID
-- ARGV[2] -> its data
-- ARGV[3] -> ttl (ms)
local workers, beats = KEYS[1], KEYS[2]
local id, data, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
`, luaNow, luaPrune, `
redis.call('HSET', workers, id, data)
redis.call('ZADD', beats, now + ttl, id)
return 1
`)

// beatsScript drops the workers whose ttl ran out and returns the data of
// the others.
var beatsScript = newScript(`
-- beats
-- KEYS[1] -> P:workers
-- KEYS[2] -> P:beats
local workers, beats = KEYS[1], KEYS[2]
`, luaNow, luaPrune, `
local out = {}
for _, id in ipairs(redis.call('ZRANGE', beats, 0, -1)) do
  local d = redis.call('HGET', workers, id)
  if d then out[#out + 1] = d end
end
return out
`)

// unbeatScript removes a worker at once.
var unbeatScript = newScript(`
-- unbeat
-- KEYS[1] -> P:workers
-- KEYS[2] -> P:beats
-- ARGV[1] -> worker ID
local workers, beats = KEYS[1], KEYS[2]
local id = ARGV[1]
redis.call('HDEL', workers, id)
redis.call('ZREM', beats, id)
return 1
`)

// beatKeys are the keys of beatScript, beatsScript and unbeatScript.
func (b *Broker) beatKeys() []string { return []string{b.global("workers"), b.global("beats")} }

// purgeScript drops the pending and delayed messages of a queue. Returns
// how many it dropped.
var purgeScript = newScript(`
-- purge
-- KEYS[1] -> K:pending
-- KEYS[2] -> K:delayed
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:count
-- KEYS[5] -> K:prio
-- KEYS[6] -> K:ppending
-- KEYS[7] -> K:inflight
-- KEYS[8] -> K:ids
local pending, delayed, msgs, count, prio, ppending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local inflight, ids = KEYS[7], KEYS[8]
local n = 0
for _, id in ipairs(redis.call('LRANGE', pending, 0, -1)) do
  redis.call('HDEL', msgs, id)
  redis.call('HDEL', count, id)
  n = n + 1
end
for _, key in ipairs({delayed, ppending}) do
  for _, id in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    redis.call('HDEL', msgs, id)
    redis.call('HDEL', count, id)
    redis.call('HDEL', prio, id)
    n = n + 1
  end
end
redis.call('DEL', pending, delayed, ppending)
-- What remains queued is in flight: the index keeps only those.
local idx = redis.call('HGETALL', ids)
for i = 1, #idx, 2 do
  if not redis.call('ZSCORE', inflight, idx[i + 1]) then redis.call('HDEL', ids, idx[i]) end
end
return n
`)

func (k keys) purgeKeys() []string {
	return []string{k.pending, k.delayed, k.msgs, k.count, k.prio, k.ppending, k.inflight, k.ids}
}

// scheduledScript returns one page of the delayed messages, earliest
// first: {envelope, due (ms), ...}; a foreign entry's envelope is a
// newline then its text (an empty ID).
var scheduledScript = newScript(`
-- scheduled
-- KEYS[1] -> K:delayed
-- KEYS[2] -> K:msgs
-- ARGV[1] -> first index of the page (0: the earliest)
-- ARGV[2] -> last index
local delayed, msgs = KEYS[1], KEYS[2]
local start, stop = ARGV[1], ARGV[2]
local out = {}
local z = redis.call('ZRANGE', delayed, start, stop, 'WITHSCORES')
for i = 1, #z, 2 do
  out[#out + 1] = redis.call('HGET', msgs, z[i]) or ('\n' .. z[i])
  out[#out + 1] = z[i + 1]
end
return out
`)

func (k keys) scheduledKeys() []string { return []string{k.delayed, k.msgs} }

// inflightScript returns the envelopes of one page of the in-flight
// messages in delivery order (by the number their tokens start with).
var inflightScript = newScript(`
-- inflight
-- KEYS[1] -> K:inflight
-- KEYS[2] -> K:tokens
-- KEYS[3] -> K:msgs
-- ARGV[1] -> first index of the page (0: the earliest delivered)
-- ARGV[2] -> last index
local inflight, tokens, msgs = KEYS[1], KEYS[2], KEYS[3]
local start, stop = tonumber(ARGV[1]), tonumber(ARGV[2])
local all = {}
for _, id in ipairs(redis.call('ZRANGE', inflight, 0, -1)) do
  local tok = redis.call('HGET', tokens, id) or ''
  local n = string.match(tok, '^(%d+):')
  all[#all + 1] = {id = id, n = tonumber(n) or 0}
end
table.sort(all, function(a, b)
  if a.n ~= b.n then return a.n < b.n end
  return a.id < b.id
end)
local out = {}
for n = start, math.min(stop, #all - 1) do
  local env = redis.call('HGET', msgs, all[n + 1].id)
  if env then out[#out + 1] = env end
end
return out
`)

func (k keys) inflightKeys() []string { return []string{k.inflight, k.tokens, k.msgs} }

// pendingScript returns {envelope, priority, ...} for one page of the due
// messages in delivery order: priorities 1-255 (K:ppending, highest
// first) then priority 0 (K:pending); a foreign entry's envelope is a
// newline then its text (an empty ID).
var pendingScript = newScript(`
-- pending
-- KEYS[1] -> K:ppending
-- KEYS[2] -> K:pending
-- KEYS[3] -> K:msgs
-- KEYS[4] -> K:prio
-- ARGV[1] -> first index of the page (0: the next to be delivered)
-- ARGV[2] -> last index (-1: the end)
local ppending, pending, msgs, prio = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local start, stop = tonumber(ARGV[1]), tonumber(ARGV[2])
local zn = redis.call('ZCARD', ppending)
local ids = {}
if stop < 0 then stop = zn + redis.call('LLEN', pending) - 1 end
if start < zn then
  for _, id in ipairs(redis.call('ZRANGE', ppending, start, math.min(stop, zn - 1))) do ids[#ids + 1] = id end
end
if stop >= zn then
  for _, id in ipairs(redis.call('LRANGE', pending, math.max(start - zn, 0), stop - zn)) do ids[#ids + 1] = id end
end
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = redis.call('HGET', msgs, id) or ('\n' .. id)
  out[#out + 1] = redis.call('HGET', prio, id) or '0'
end
return out
`)

func (k keys) pendingKeys() []string { return []string{k.ppending, k.pending, k.msgs, k.prio} }

// findScript returns {list, envelope, at (ms) or empty} for the message
// of the task ID: through the index K:ids for a queued message (in
// flight, scheduled or else pending: one lookup each, whatever the
// queue's length), or among the completed (K:done, at most CompletedMax
// entries, each compared by its task ID's bytes alone); or false.
var findScript = newScript(`
-- find
-- KEYS[1] -> K:msgs
-- KEYS[2] -> K:ids
-- KEYS[3] -> K:inflight
-- KEYS[4] -> K:delayed
-- KEYS[5] -> K:done
-- ARGV[1] -> task ID
local msgs, ids, inflight, delayed, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix = ARGV[1] .. '\n'
local mid = redis.call('HGET', ids, ARGV[1])
if mid then
  local env = redis.call('HGET', msgs, mid)
  if env and string.sub(env, 1, #prefix) == prefix then
    if redis.call('ZSCORE', inflight, mid) then return {'inflight', env, ''} end
    local due = redis.call('ZSCORE', delayed, mid)
    if due then return {'scheduled', env, due} end
    return {'pending', env, ''}
  end
end
for _, e in ipairs(redis.call('LRANGE', done, 0, -1)) do
  local nl = string.find(e, '\n', 1, true)
  if nl and string.sub(e, nl + 1, nl + #prefix) == prefix then
    return {'completed', string.sub(e, nl + 1), string.sub(e, 1, nl - 1)}
  end
end
return false
`)

func (k keys) findKeys() []string {
	return []string{k.msgs, k.ids, k.inflight, k.delayed, k.done}
}

// luaEmpty defines empty(doneAge): nothing of the queue remains — no
// message pending, scheduled or in flight, its archive empty, no dead
// letters of an older version, and no completed message acked within
// doneAge ms (0: none at all) — over the locals pending, ppending,
// delayed, inflight, archive, done and dead of the prologue, and now.
const luaEmpty = `
local function doneOld(doneAge)
  if redis.call('LLEN', done) == 0 then return true end
  if doneAge <= 0 then return false end
  local newest = redis.call('LINDEX', done, 0)
  local at = newest and tonumber(string.match(newest, '^(%d+)\n'))
  return at ~= nil and at < now - doneAge
end
local function empty(doneAge)
  return redis.call('LLEN', pending) == 0 and redis.call('ZCARD', ppending) == 0 and
    redis.call('ZCARD', delayed) == 0 and redis.call('ZCARD', inflight) == 0 and
    redis.call('ZCARD', archive) == 0 and redis.call('EXISTS', dead) == 0 and
    doneOld(doneAge)
end
`

// unlistScript is the first step of taking an empty queue out of
// P:queues (Queues): when nothing of the queue remains but completed
// messages all acked more than doneAge ago (which stay, bounded by
// CompletedMax), it marks the queue K:unlisted. It deletes nothing: the
// archive's retention is the workers' (WorkerConfig.ArchiveRetention),
// never an operator's listing. Returns 1 when marked (the caller then
// removes the queue from P:queues and runs relistScript), else 0.
var unlistScript = newScript(`
-- unlist
-- KEYS[1] -> K:pending
-- KEYS[2] -> K:ppending
-- KEYS[3] -> K:delayed
-- KEYS[4] -> K:inflight
-- KEYS[5] -> K:archive
-- KEYS[6] -> K:done
-- KEYS[7] -> K:dead
-- KEYS[8] -> K:unlisted
-- ARGV[1] -> how long ago the newest completed message must have been acked (ms; 0: none may remain)
local pending, ppending, delayed, inflight = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local archive, done, dead, unlisted = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local doneAge = tonumber(ARGV[1])
`, luaNow, luaEmpty, `
if not empty(doneAge) then return 0 end
redis.call('SET', unlisted, '1')
return 1
`)

func (k keys) unlistKeys() []string {
	return []string{k.pending, k.ppending, k.delayed, k.inflight, k.archive, k.done, k.dead, k.unlisted}
}

// relistScript is the last step of taking a queue out of P:queues, run
// after the removal: a publish or requeue that came since unlistScript
// deleted the mark, or something else filled the queue. Returns 1 when
// the queue must go back into P:queues (deleting the mark), else 0 (it
// stays out, marked, until the next publish).
var relistScript = newScript(`
-- relist
-- KEYS[1] -> K:pending
-- KEYS[2] -> K:ppending
-- KEYS[3] -> K:delayed
-- KEYS[4] -> K:inflight
-- KEYS[5] -> K:archive
-- KEYS[6] -> K:done
-- KEYS[7] -> K:dead
-- KEYS[8] -> K:unlisted
-- ARGV[1] -> as unlistScript's ARGV[1]
local pending, ppending, delayed, inflight = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local archive, done, dead, unlisted = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local doneAge = tonumber(ARGV[1])
`, luaNow, luaEmpty, `
if redis.call('EXISTS', unlisted) == 1 and empty(doneAge) then return 0 end
redis.call('DEL', unlisted)
return 1
`)

func (k keys) relistKeys() []string {
	return []string{k.pending, k.ppending, k.delayed, k.inflight, k.archive, k.done, k.dead, k.unlisted}
}

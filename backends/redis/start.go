package redisbackend

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
	"github.com/errand-go/errand/internal/statejson"
)

var (
	_ driver.Starter       = (*Backend)(nil)
	_ driver.PendingWriter = (*Backend)(nil)
)

// startScript writes the STARTED state unless the task's previous state
// forbids it (driver.Starter's table; driver.StartRequest.Allows is the
// same rule in Go). Returns {startWritten, prev or false} when it wrote
// STARTED, {0, prev} otherwise.
//
// Only STARTED is stored: a key holds the current state alone, and no
// reader can see RECEIVED between two writes of one script. A written
// state keeps prev's created_at, spliced in as a JSON string, and its
// started_at is no earlier than that (notBefore: the producer's clock may
// be ahead of the worker's), so the rest of the JSON is Go's own encoding,
// never re-encoded by cjson.
var startScript = newScript(`
-- start
-- KEYS[1] -> prefix:task:UUID
-- ARGV[1] -> task name
-- ARGV[2] -> attempt
-- ARGV[3] -> first delivery ('1') or a redelivery ('0')
-- ARGV[4] -> expiry (ms)
-- ARGV[5] -> the STARTED state's JSON up to and including "created_at":
-- ARGV[6] -> its own created_at (a JSON string)
-- ARGV[7] -> its own started_at (a JSON string; '': none)
-- ARGV[8] -> the rest of its JSON, after started_at
local task = KEYS[1]
local name, attempt, first, expiry = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local head, created, started, tail = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
`, redisconn.LuaNotBefore, fmt.Sprintf(`
local WRITTEN = %d
`, startWritten), `
local raw = redis.call('GET', task)
if raw then
  local p = cjson.decode(raw)
  local prevName = p.task_name
  if type(prevName) ~= 'string' then prevName = '' end
  local st = p.state
  local att = tonumber(p.attempt) or 0
  if prevName ~= '' and prevName ~= name then return {0, raw} end
  if st == 'SUCCESS' or st == 'FAILURE' or st == 'CANCELLED' then return {0, raw} end
  if att > attempt then return {0, raw} end
  if st == 'STARTED' and first == '1' then return {0, raw} end
  if type(p.created_at) == 'string' then
    created = cjson.encode(p.created_at)
    if started ~= '' then started = notBefore(started, created) end
  end
end
if started ~= '' then started = ',"started_at":' .. started end
redis.call('SET', task, head .. created .. started .. tail, 'PX', expiry)
return {WRITTEN, raw or false}
`)

// startWritten is startScript's first answer when it wrote STARTED.
const startWritten = 1

// startKeys are the keys of startScript for task id.
func (b *Backend) startKeys(id string) []string { return []string{b.taskKey(id)} }

// createdKey is where encoding/json puts a TaskState's created_at: the
// last occurrence in its encoding (only times follow it, and an earlier
// occurrence inside a result's raw JSON comes before). startedKey follows
// it in a STARTED state.
var (
	createdKey = []byte(`"created_at":`)
	startedKey = []byte(`,"started_at":`)
)

// leadingString splits v after the JSON string it begins with: the
// string with its quotes, and the rest. A time encoding/json writes (RFC
// 3339) has no escapes, so the string ends at its next quote. ok is false
// when v does not begin with such a string.
func leadingString(v []byte) (str, rest []byte, ok bool) {
	if len(v) == 0 || v[0] != '"' {
		return nil, v, false
	}
	j := bytes.IndexByte(v[1:], '"')
	if j < 0 {
		return nil, v, false
	}
	return v[:j+2], v[j+2:], true
}

// startArgs returns the script's ARGV for r.
func (b *Backend) startArgs(r driver.StartRequest) ([]any, error) {
	st := r.Started
	v, err := statejson.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("redis backend: encode state of %s: %w", st.TaskUUID, err)
	}
	i := bytes.LastIndex(v, createdKey)
	if i < 0 {
		return nil, fmt.Errorf("redis backend: encode state of %s: no created_at in %s", st.TaskUUID, v)
	}
	head := v[:i+len(createdKey)]
	own, tail, ok := leadingString(v[len(head):])
	if !ok {
		return nil, fmt.Errorf("redis backend: encode state of %s: created_at is not a string in %s", st.TaskUUID, v)
	}
	// tail is ,"started_at":"…" (a JSON string with no escapes, as
	// created_at) and what follows it, or without started_at (none set).
	var started []byte
	if after, found := bytes.CutPrefix(tail, startedKey); found {
		if started, tail, ok = leadingString(after); !ok {
			return nil, fmt.Errorf("redis backend: encode state of %s: started_at is not a string in %s", st.TaskUUID, v)
		}
	}
	first := "0"
	if r.FirstDelivery {
		first = "1"
	}
	return []any{st.TaskName, st.Attempt, first, b.opts.ResultExpiry.Milliseconds(), head, own, started, tail}, nil
}

// Start begins each request's attempt with one script per request (the
// read, the check of driver.Starter's table and the SET ... PX of STARTED,
// atomically), all in one pipeline: one round trip on a single node, one
// per node holding the batch's keys on a cluster (each task key is its own
// slot). A script the server does not have yet is loaded and the requests
// that missed it run again.
func (b *Backend) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	out := make([]driver.StartResult, len(reqs))
	var run []int // the requests whose states encode, in order
	args := make([][]any, len(reqs))
	keys := make([][]string, len(reqs))
	for i, r := range reqs {
		a, err := b.startArgs(r)
		if err != nil {
			out[i].Err = err // this request alone
			continue
		}
		args[i], keys[i] = a, b.startKeys(r.Started.TaskUUID)
		run = append(run, i)
	}
	cmds := make([]*goredis.Cmd, len(reqs))
	if len(run) == 1 {
		i := run[0]
		cmds[i] = startScript.Run(ctx, b.scripts, keys[i], args[i]...)
	} else if len(run) > 1 {
		pipe := b.rdb.Pipeline()
		for _, i := range run {
			cmds[i] = startScript.EvalSha(ctx, redisconn.NoRetry(pipe), keys[i], args[i]...)
		}
		pipe.Exec(ctx) // errors are read per command below
		for _, i := range run {
			if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				cmds[i] = startScript.Run(ctx, b.scripts, keys[i], args[i]...)
			}
		}
	}
	for _, i := range run {
		r, err := cmds[i].Slice()
		if err != nil {
			out[i].Err = b.err(ctx, err)
			continue
		}
		if len(r) != 2 {
			out[i].Err = fmt.Errorf("redis backend: start %s: unexpected reply %v", reqs[i].Started.TaskUUID, r)
			continue
		}
		written, _ := r[0].(int64)
		out[i].Written = written == startWritten
		if raw, ok := r[1].(string); ok {
			if out[i].Prev, err = decodeState(reqs[i].Started.TaskUUID, raw); err != nil {
				out[i] = driver.StartResult{Err: err}
			}
		}
	}
	return out
}

// SetPendingIfAbsent writes each state with SET ... NX PX, all in one
// pipeline (split per node on a cluster).
func (b *Backend) SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error {
	return b.setStates(ctx, sts, true)
}

var _ driver.Located = (*Backend)(nil)

// Location declares where the backend keeps its task states, for errand's
// Redis broker to co-locate with it (driver.Located, driver.Colocator): a
// *redisconn.States of its client, prefix and ResultExpiry, a type of
// errand's internal module that only its Redis drivers understand. The
// broker, on the same single Redis server, then records PENDING in the
// round trip of a publish, STARTED in its fetch and the final state in
// its ack.
func (b *Backend) Location() any { return b.loc }

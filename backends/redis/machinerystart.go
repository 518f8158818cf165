package redisbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

var _ driver.Starter = (*MachineryBackend)(nil)

// mStart is startScript on machinery's state JSON: it writes the STARTED
// state at the task's UUID unless the task's previous state forbids it
// (driver.Starter's table; driver.StartRequest.Allows is the same rule in
// Go). Returns {1, prev or false} when it wrote STARTED, {0, prev}
// otherwise. A previous state written by machinery has no Attempt: 0. A
// written state keeps prev's CreatedAt, spliced in as a JSON string, so
// the rest of the JSON is Go's own encoding, never re-encoded by cjson;
// a body that is not JSON is no task state and is written over, as
// SetStates would. Its StartedAt, spliced in too, is never earlier than
// the CreatedAt it keeps (notBefore: the producer's clock may be ahead).
var mStart = newScript(`
-- mstart
-- KEYS[1] -> UUID
-- ARGV[1] -> task name
-- ARGV[2] -> attempt
-- ARGV[3] -> first delivery ('1') or a redelivery ('0')
-- ARGV[4] -> expiry (ms; 0: none)
-- ARGV[5] -> the STARTED state's JSON up to and including "CreatedAt":
-- ARGV[6] -> its own CreatedAt (a JSON string)
-- ARGV[7] -> its JSON from there up to and including "StartedAt":
-- ARGV[8] -> its StartedAt (a JSON string)
-- ARGV[9] -> the rest of its JSON
local task = KEYS[1]
local name, attempt, first, expiry = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local head, created, mid, started, tail = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
`, redisconn.LuaNotBefore, `
local raw = redis.call('GET', task)
if raw then
  local ok, p = pcall(cjson.decode, raw)
  if ok and type(p) == 'table' then
    local prevName = p.TaskName
    if type(prevName) ~= 'string' then prevName = '' end
    local st = p.State
    local att = tonumber(p.Attempt) or 0
    if prevName ~= '' and prevName ~= name then return {0, raw} end
    if st == 'SUCCESS' or st == 'FAILURE' or st == 'CANCELLED' then return {0, raw} end
    if att > attempt then return {0, raw} end
    if st == 'STARTED' and first == '1' then return {0, raw} end
    if type(p.CreatedAt) == 'string' then created = cjson.encode(p.CreatedAt) end
  end
end
started = notBefore(started, created)
local st = head .. created .. mid .. started .. tail
if expiry > 0 then
  redis.call('SET', task, st, 'PX', expiry)
else
  redis.call('SET', task, st)
end
return {1, raw or false}
`)

// mStartKeys are mStart's keys for task id: machinery keeps a task's
// state at its bare UUID.
func mStartKeys(id string) []string { return []string{id} }

// mCreatedKey is where encoding/json puts a machinery state's CreatedAt:
// the last occurrence in its encoding (only TTL and errand's fields
// follow it, and an occurrence inside a result's raw JSON comes before).
var mCreatedKey = []byte(`"CreatedAt":`)

// mStartArgs returns mStart's ARGV for r.
func (b *MachineryBackend) mStartArgs(r driver.StartRequest) ([]any, error) {
	st := r.Started
	v, err := json.Marshal(toMachinery(st))
	if err != nil {
		return nil, fmt.Errorf("redis machinery backend: encode state of %s: %w", st.TaskUUID, err)
	}
	i := bytes.LastIndex(v, mCreatedKey)
	if i < 0 {
		return nil, fmt.Errorf("redis machinery backend: encode state of %s: no CreatedAt in %s", st.TaskUUID, v)
	}
	head := v[:i+len(mCreatedKey)]
	own, tail, ok := leadingString(v[len(head):])
	if !ok {
		return nil, fmt.Errorf("redis machinery backend: encode state of %s: CreatedAt is not a string in %s", st.TaskUUID, v)
	}
	k := bytes.Index(tail, mStartedKey)
	if k < 0 {
		return nil, fmt.Errorf("redis machinery backend: encode state of %s: no StartedAt in %s", st.TaskUUID, v)
	}
	mid := tail[:k+len(mStartedKey)]
	started, tail, ok := leadingString(tail[len(mid):])
	if !ok {
		return nil, fmt.Errorf("redis machinery backend: encode state of %s: StartedAt is not a string in %s", st.TaskUUID, v)
	}
	first := "0"
	if r.FirstDelivery {
		first = "1"
	}
	return []any{st.TaskName, st.Attempt, first, b.opts.ResultsExpireIn.Milliseconds(), head, own, mid, started, tail}, nil
}

// mStartedKey is where encoding/json puts a machinery state's StartedAt
// (errand's field), after its CreatedAt.
var mStartedKey = []byte(`"StartedAt":`)

// Start begins each request's attempt with one script per request (the
// read of the task's state, the check of driver.Starter's table and the
// SET of STARTED, atomically), all in one pipeline: one round trip where
// a GetState and a SetStates would take two. Only STARTED is stored, as
// machinery's own worker leaves only its last state. A script the server
// does not have yet is loaded and the requests that missed it run again.
func (b *MachineryBackend) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	if err := b.isClosed(); err != nil {
		return driver.StartFailed(len(reqs), err)
	}
	out := make([]driver.StartResult, len(reqs))
	args := make([][]any, len(reqs))
	var run []int // the requests whose states encode, in order
	for i, r := range reqs {
		a, err := b.mStartArgs(r)
		if err != nil {
			out[i].Err = err // this request alone
			continue
		}
		args[i] = a
		run = append(run, i)
	}
	cmds := make([]*goredis.Cmd, len(reqs))
	if len(run) == 1 {
		i := run[0]
		cmds[i] = mStart.Run(ctx, b.scr, mStartKeys(reqs[i].Started.TaskUUID), args[i]...)
	} else if len(run) > 1 {
		pipe := b.rdb.Pipeline()
		for _, i := range run {
			cmds[i] = mStart.EvalSha(ctx, redisconn.NoRetry(pipe), mStartKeys(reqs[i].Started.TaskUUID), args[i]...)
		}
		pipe.Exec(ctx) // errors are read per command below
		for _, i := range run {
			if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				cmds[i] = mStart.Run(ctx, b.scr, mStartKeys(reqs[i].Started.TaskUUID), args[i]...)
			}
		}
	}
	for _, i := range run {
		id := reqs[i].Started.TaskUUID
		r, err := cmds[i].Slice()
		if err != nil {
			out[i].Err = fmt.Errorf("redis machinery backend: start %s: %w", id, err)
			continue
		}
		if len(r) != 2 {
			out[i].Err = fmt.Errorf("redis machinery backend: start %s: unexpected reply %v", id, r)
			continue
		}
		written, _ := r[0].(int64)
		out[i].Written = written == 1
		if raw, ok := r[1].(string); ok {
			prev, err := fromMachinery([]byte(raw))
			if err != nil {
				if !out[i].Written {
					out[i] = driver.StartResult{Err: fmt.Errorf("redis machinery backend: state of %s: %w", id, err)}
				}
				continue // written over a key that held no task state, as SetStates would
			}
			out[i].Prev = prev
		}
	}
	return out
}

package redisbackend

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
	"github.com/errand-go/errand/internal/statejson"
)

var _ driver.Canceller = (*Backend)(nil)

// What cancelScript, mCancel, setStateScript and mSetState answer first.
const (
	cancelNone    = 0 // nothing written: the task has no state, or a terminal one
	cancelWritten = 1 // CANCELLED written (cancel), the state written (setState)
	// cancelKept: setState did not write over the task's CANCELLED.
	cancelKept = 2
)

// luaCancelAnswers names the answers in Lua.
var luaCancelAnswers = fmt.Sprintf(`
local NONE, WRITTEN, KEPT = %d, %d, %d
`, cancelNone, cancelWritten, cancelKept)

// cancelScript writes the CANCELLED state over the task's state unless it
// has none or a terminal one (driver.Canceller). Returns {WRITTEN, prev}
// or {NONE, prev or false}. The written state keeps prev's task_name,
// attempt and created_at, spliced into the canceller's JSON (the name as
// it was stored when the layout allows, else re-encoded by cjson), and
// its finished_at is no earlier than that created_at (notBefore). A value
// that is no JSON object is answered as it is, unwritten: Go reports it.
var cancelScript = newScript(`
-- cancel
-- KEYS[1] -> prefix:task:UUID
-- ARGV[1] -> expiry (ms; 0: none)
-- ARGV[2] -> the CANCELLED state's JSON up to and including "task_name":
-- ARGV[3] -> its JSON after the (empty) name up to the attempt's place
-- ARGV[4] -> its JSON from there up to and including "created_at":
-- ARGV[5] -> its own created_at (a JSON string)
-- ARGV[6] -> its JSON from there up to and including "finished_at":
-- ARGV[7] -> its finished_at (a JSON string)
-- ARGV[8] -> the rest of its JSON
local task = KEYS[1]
local expiry = ARGV[1]
local head, mid, pre, created, between, finished, tail = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
`, redisconn.LuaNotBefore, luaCancelAnswers, `
local raw = redis.call('GET', task)
if not raw then return {NONE, false} end
local ok, p = pcall(cjson.decode, raw)
if not ok or type(p) ~= 'table' then return {NONE, raw} end
local st = p.state
if st == 'SUCCESS' or st == 'FAILURE' or st == 'CANCELLED' then return {NONE, raw} end
`, luaCancelWrite("task_uuid", "task_name", "attempt", "created_at"))

// luaCancelWrite is the end of a cancel script on a state format whose
// fields are named uuid, name, attempt and created: with raw the task's
// state, p its decoding and the canceller's parts from the script's
// prologue, it writes the cancel with the task's name (as it was stored
// when the layout allows, else re-encoded by cjson), attempt and created
// time spliced in, its finished time no earlier than that created time
// (LuaNotBefore), and returns {WRITTEN, raw}.
func luaCancelWrite(uuid, name, attempt, created string) string {
	return fmt.Sprintf(`local name = string.match(raw, '^{"%[1]s":"[^"\\]*","%[2]s":("[^"\\]*")')
if not name then
  name = '""'
  if type(p.%[2]s) == 'string' then name = cjson.encode(p.%[2]s) end
end
local attempt = ''
local att = tonumber(p.%[3]s)
if att and att >= 1 then attempt = string.format(',"%[3]s":%%d', att) end
if type(p.%[4]s) == 'string' then created = cjson.encode(p.%[4]s) end
finished = notBefore(finished, created)
local v = head .. name .. mid .. attempt .. pre .. created .. between .. finished .. tail
if expiry ~= '0' then redis.call('SET', task, v, 'PX', expiry) else redis.call('SET', task, v) end
return {WRITTEN, raw}
`, uuid, name, attempt, created)
}

// cancelKeys are cancelScript's keys for task id.
func (b *Backend) cancelKeys(id string) []string { return []string{b.taskKey(id)} }

// cancelFormat is how a state format meets cancelArgs: the backend's
// name for errors, the format's encoder, and the places in an encoding
// that cutCancel cuts at.
type cancelFormat struct {
	backend                             string
	encode                              func(*driver.TaskState) ([]byte, error)
	emptyName, state, created, finished []byte
}

// stateCancel is errand's own state format (cancelScript).
var stateCancel = &cancelFormat{
	backend:   "redis backend",
	encode:    statejson.Marshal,
	emptyName: []byte(`"task_name":""`),
	state:     []byte(`,"state":`),
	created:   createdKey,
	finished:  []byte(`,"finished_at":`),
}

// cancelArgs returns the cancel script's ARGV for st, a CANCELLED state,
// in format f with expiry: its encoding with no name, attempt, start or
// progress (the script puts the task's name and attempt in, as the
// stored state has them), cut at the places the script splices.
func cancelArgs(f *cancelFormat, st *driver.TaskState, expiry time.Duration) ([]any, error) {
	if st.State != driver.StateCancelled {
		return nil, fmt.Errorf("%s: cancel of task %s with state %q; want %s", f.backend, st.TaskUUID, st.State, driver.StateCancelled)
	}
	c := st.Copy()
	c.TaskName, c.Attempt, c.StartedAt, c.Progress = "", 0, time.Time{}, nil
	if c.FinishedAt.IsZero() {
		c.FinishedAt = c.CreatedAt
	}
	v, err := f.encode(c)
	if err != nil {
		return nil, fmt.Errorf("%s: encode state of %s: %w", f.backend, st.TaskUUID, err)
	}
	head, mid, pre, created, between, finished, tail, err := cutCancel(v, f.emptyName, f.state, f.created, f.finished)
	if err != nil {
		return nil, fmt.Errorf("%s: encode state of %s: %w in %s", f.backend, st.TaskUUID, err, v)
	}
	return []any{expiry.Milliseconds(), head, mid, pre, created, between, finished, tail}, nil
}

// cutCancel cuts v, the encoding of a CANCELLED state with an empty name
// (nameKey: its empty name with its key) and no attempt, into the parts
// the cancel scripts splice: up to and including the name's key; from
// after the name up to the attempt's place, which is right after the
// state's field (stateKey begins it); up to and including the created
// time's key (createdKey, its last occurrence: only times and errand's
// own short fields follow it); the created time; up to and including the
// finished time's key (finishedKey); the finished time; the rest.
func cutCancel(v, nameKey, stateKey, createdKey, finishedKey []byte) (head, mid, pre, created, between, finished, tail []byte, err error) {
	i := bytes.Index(v, nameKey)
	if i < 0 {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("no empty task name")
	}
	head = v[:i+len(nameKey)-2] // the key and its colon, without ""
	rest := v[i+len(nameKey):]
	if !bytes.HasPrefix(rest, stateKey) {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("no state after the task name")
	}
	state, after, ok := leadingString(rest[len(stateKey):])
	if !ok {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("the state is not a string")
	}
	mid = rest[:len(stateKey)+len(state)]
	j := bytes.LastIndex(after, createdKey)
	if j < 0 {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("no created time")
	}
	pre = after[:j+len(createdKey)]
	created, after, ok = leadingString(after[len(pre):])
	if !ok {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("the created time is not a string")
	}
	k := bytes.Index(after, finishedKey)
	if k < 0 {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("no finished time")
	}
	between = after[:k+len(finishedKey)]
	finished, tail, ok = leadingString(after[len(between):])
	if !ok {
		return nil, nil, nil, nil, nil, nil, nil, fmt.Errorf("the finished time is not a string")
	}
	return head, mid, pre, created, between, finished, tail, nil
}

// Cancel records each state, CANCELLED, with one script per task (the
// read, the check that the task has a state that is not terminal, and
// the SET ... PX, atomically), all in one pipeline: one round trip on a
// single node, one per node holding the batch's keys on a cluster
// (driver.Canceller). The written state keeps the task's name, attempt and
// CreatedAt. A state that is not CANCELLED, or cannot be encoded, fails
// alone.
func (b *Backend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	out := make([]driver.CancelResult, len(sts))
	if b.closed.Load() {
		for i := range out {
			out[i].Err = fmt.Errorf("redis backend: %w", driver.ErrClosed)
		}
		return out
	}
	keys := make([][]string, len(sts))
	args := make([][]any, len(sts))
	for i, st := range sts {
		if args[i], out[i].Err = cancelArgs(stateCancel, st, b.opts.ResultExpiry); out[i].Err == nil {
			keys[i] = b.cancelKeys(st.TaskUUID)
		}
	}
	cmds := evalEach(ctx, b.rdb, b.scripts, cancelScript, keys, args)
	for i, c := range cmds {
		if c == nil {
			continue
		}
		r, err := c.Slice()
		if err != nil {
			out[i].Err = b.err(ctx, err)
			continue
		}
		out[i] = cancelResult(r, func(raw string) (*driver.TaskState, error) { return decodeState(sts[i].TaskUUID, raw) })
		if out[i].Err != nil {
			out[i].Err = fmt.Errorf("redis backend: cancel %s: %w", sts[i].TaskUUID, out[i].Err)
		}
	}
	return out
}

// cancelResult reads a cancel script's reply r: {WRITTEN or NONE, the
// state before (a string) or false}, decoding the state with decode.
func cancelResult(r []any, decode func(raw string) (*driver.TaskState, error)) driver.CancelResult {
	if len(r) != 2 {
		return driver.CancelResult{Err: fmt.Errorf("unexpected reply %v", r)}
	}
	n, _ := r[0].(int64)
	raw, ok := r[1].(string)
	if !ok {
		return driver.CancelResult{}
	}
	prev, err := decode(raw)
	if err != nil {
		return driver.CancelResult{Err: err}
	}
	return driver.CancelResult{Prev: prev, Written: n == cancelWritten}
}

// evalEach runs script once for each i with keys[i] (nil: none for i),
// as one command alone or all in one pipeline, and returns the commands
// (nil where none ran). A script the server does not have yet is loaded
// and the calls that missed it run again, in order.
func evalEach(ctx context.Context, rdb goredis.UniversalClient, scr goredis.Scripter, script *goredis.Script, keys [][]string, args [][]any) []*goredis.Cmd {
	var run []int
	for i, k := range keys {
		if k != nil {
			run = append(run, i)
		}
	}
	cmds := make([]*goredis.Cmd, len(keys))
	switch {
	case len(run) == 1:
		i := run[0]
		cmds[i] = script.Run(ctx, scr, keys[i], args[i]...)
	case len(run) > 1:
		pipe := rdb.Pipeline()
		for _, i := range run {
			cmds[i] = script.EvalSha(ctx, redisconn.NoRetry(pipe), keys[i], args[i]...)
		}
		pipe.Exec(ctx) // errors are read per command below
		for _, i := range run {
			if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				cmds[i] = script.Run(ctx, scr, keys[i], args[i]...)
			}
		}
	}
	return cmds
}

// setStateScript writes a state other than PENDING unless the task is
// CANCELLED (driver.Canceller: a cancel is never overwritten). Returns
// WRITTEN or KEPT.
var setStateScript = newScript(`
-- setState
-- KEYS[1] -> prefix:task:UUID
-- ARGV[1] -> the state (JSON)
-- ARGV[2] -> expiry (ms; 0: none)
local task = KEYS[1]
local state, expiry = ARGV[1], ARGV[2]
`, redisconn.LuaCancelled, luaCancelAnswers, `
if cancelled(redis.pcall('GET', task)) then return KEPT end
if expiry ~= '0' then redis.call('SET', task, state, 'PX', expiry) else redis.call('SET', task, state) end
return WRITTEN
`)

// setStateKeys are setStateScript's keys for task id.
func (b *Backend) setStateKeys(id string) []string { return []string{b.taskKey(id)} }

// keptErr is the error of a state setStateScript did not write.
func keptErr(st *driver.TaskState) error {
	return fmt.Errorf("redis backend: task %s: %s not written: %w", st.TaskUUID, st.State, driver.ErrCancelled)
}

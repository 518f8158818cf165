package redisbackend

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

var _ driver.Canceller = (*MachineryBackend)(nil)

// A cancel in machinery's format. machinery's readers know SUCCESS and
// FAILURE alone for finished (its AsyncResult.Get waits on any other
// state), so a CANCELLED state is stored as machinery's FAILURE, its
// Error the canceller's ("errand: task cancelled"), with errand's
// ErrorKind "cancelled" beside it; errand reads that back as CANCELLED
// (machineryCancelled), and a machinery producer's Get returns the
// failure.

// machineryCancelKind is the ErrorKind that marks a machinery FAILURE as
// errand's CANCELLED.
const machineryCancelKind = "cancelled"

// machineryCancelError is the Error of a cancel stored without one.
const machineryCancelError = "errand: task cancelled"

// machineryCancelled reports whether m, as stored, is errand's CANCELLED.
func machineryCancelled(m *machineryState) bool {
	return m.State == string(driver.StateFailure) && m.ErrorKind == machineryCancelKind
}

// luaMCancelled defines cancelled(raw) on machinery's state JSON: whether
// raw (GET's reply; false: none) is a FAILURE marked as errand's cancel.
// Only a state holding the marker is decoded.
var luaMCancelled = fmt.Sprintf(`
local CANCEL_MARK = %q
local function cancelled(raw)
  if type(raw) ~= 'string' or not string.find(raw, CANCEL_MARK, 1, true) then return false end
  local ok, p = pcall(cjson.decode, raw)
  return ok and type(p) == 'table' and p.State == 'FAILURE' and p.ErrorKind == %q
end
`, `"ErrorKind":"`+machineryCancelKind+`"`, machineryCancelKind)

// mCancel is cancelScript on machinery's state JSON: it writes the
// cancel (machinery's FAILURE, marked) over the task's state unless it
// has none or a terminal one (SUCCESS, FAILURE: a cancel is a FAILURE
// too). Returns {WRITTEN, prev} or {NONE, prev or false}: false also for
// a key that holds no task state (a group's meta, which machinery keeps
// at the group's UUID, or any other value), left as it is. The written
// state keeps prev's TaskName, Attempt (errand's; placed after State) and
// CreatedAt, spliced in, and its FinishedAt is no earlier than that
// CreatedAt.
var mCancel = newScript(`
-- mcancel
-- KEYS[1] -> UUID
-- ARGV[1] -> expiry (ms; 0: none)
-- ARGV[2] -> the cancel's JSON up to and including "TaskName":
-- ARGV[3] -> its JSON after the (empty) name up to the attempt's place
-- ARGV[4] -> its JSON from there up to and including "CreatedAt":
-- ARGV[5] -> its own CreatedAt (a JSON string)
-- ARGV[6] -> its JSON from there up to and including "FinishedAt":
-- ARGV[7] -> its FinishedAt (a JSON string)
-- ARGV[8] -> the rest of its JSON
local task = KEYS[1]
local expiry = ARGV[1]
local head, mid, pre, created, between, finished, tail = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
`, redisconn.LuaNotBefore, luaCancelAnswers, `
local raw = redis.call('GET', task)
if not raw then return {NONE, false} end
local ok, p = pcall(cjson.decode, raw)
-- machinery keeps a group's meta at the group's UUID, beside the tasks'
-- states: a value that is no task state is no task to cancel.
if not ok or type(p) ~= 'table' or type(p.State) ~= 'string' or p.State == '' then return {NONE, false} end
if p.State == 'SUCCESS' or p.State == 'FAILURE' then return {NONE, raw} end
`, luaCancelWrite("TaskUUID", "TaskName", "Attempt", "CreatedAt"))

// mCancelKeys are mCancel's keys for task id.
func mCancelKeys(id string) []string { return []string{id} }

// machineryCancel is machinery's state format (mCancel).
var machineryCancel = &cancelFormat{
	backend:   "redis machinery backend",
	encode:    func(st *driver.TaskState) ([]byte, error) { return json.Marshal(toMachinery(st)) },
	emptyName: []byte(`"TaskName":""`),
	state:     []byte(`,"State":`),
	created:   mCreatedKey,
	finished:  []byte(`,"FinishedAt":`),
}

// Cancel records each state, CANCELLED, as machinery's FAILURE marked as
// errand's cancel (see machineryCancelled), with one script per task
// (the read, the check that the task has a state that is not terminal,
// and the SET, atomically), all in one pipeline (driver.Canceller). The
// written state keeps the task's name, attempt and CreatedAt. A state
// that is not CANCELLED, or cannot be encoded, fails alone.
func (b *MachineryBackend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	if err := b.isClosed(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	keys := make([][]string, len(sts))
	args := make([][]any, len(sts))
	for i, st := range sts {
		if args[i], out[i].Err = cancelArgs(machineryCancel, st, b.opts.ResultsExpireIn); out[i].Err == nil {
			keys[i] = mCancelKeys(st.TaskUUID)
		}
	}
	cmds := evalEach(ctx, b.rdb, b.scr, mCancel, keys, args)
	for i, c := range cmds {
		if c == nil {
			continue
		}
		id := sts[i].TaskUUID
		r, err := c.Slice()
		if err != nil {
			out[i].Err = fmt.Errorf("redis machinery backend: cancel %s: %w", id, err)
			continue
		}
		out[i] = cancelResult(r, func(raw string) (*driver.TaskState, error) { return fromMachinery([]byte(raw)) })
		if out[i].Err != nil {
			out[i].Err = fmt.Errorf("redis machinery backend: cancel %s: state: %w", id, out[i].Err)
		}
	}
	return out
}

// mSetState is setStateScript on machinery's state JSON: it writes a
// state other than PENDING unless the task is cancelled. Returns WRITTEN
// or KEPT.
var mSetState = newScript(`
-- msetState
-- KEYS[1] -> UUID
-- ARGV[1] -> the state (machinery's JSON)
-- ARGV[2] -> expiry (ms; 0: none)
local task = KEYS[1]
local state, expiry = ARGV[1], ARGV[2]
`, luaMCancelled, luaCancelAnswers, `
if cancelled(redis.pcall('GET', task)) then return KEPT end
if expiry ~= '0' then redis.call('SET', task, state, 'PX', expiry) else redis.call('SET', task, state) end
return WRITTEN
`)

// mSetStateKeys are mSetState's keys for task id.
func mSetStateKeys(id string) []string { return []string{id} }

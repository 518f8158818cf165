package redisbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

// MachineryChordMutex is the key of the redsync lock under which machinery
// v2's Redis backend sets a group's ChordTriggered (TriggerChord).
const MachineryChordMutex = "TriggerChordMutex"

// MachineryOptions configures a [MachineryBackend].
type MachineryOptions struct {
	// ResultsExpireIn is how long a task's state is kept after its last
	// write (machinery's results_expire_in). Negative: states and group
	// metadata never expire, as machinery's go-redis backend does with a
	// negative results_expire_in (ResultExpiry then reports 0). Default
	// (0): 1h, machinery's.
	ResultsExpireIn time.Duration
	// GroupExpiry is how long a group's metadata is kept from InitGroup.
	// machinery keeps it ResultsExpireIn; errand keeps it longer so a
	// long group's chord can still fire. Default: 24h, never less than
	// ResultsExpireIn; none when ResultsExpireIn is negative.
	GroupExpiry time.Duration
	// ClaimWait bounds how long ClaimChord waits for a machinery worker
	// holding MachineryChordMutex (redsync holds it at most 8s).
	// Default: 10s.
	ClaimWait time.Duration
	// CloseClient: Close also closes the client. Default: false.
	CloseClient bool
}

// MachineryBackend is a [driver.Backend] that keeps states, results and
// group metadata where and how machinery v2's Redis backend does, so an
// unchanged machinery producer's AsyncResult.Get, group and chord results
// read what errand workers record, and machinery workers in the same fleet
// complete groups errand workers began and the other way round. See
// docs/migrating-from-machinery.md.
//
// A task's state is machinery's TaskState JSON at the key named by its
// UUID (TaskUUID, TaskName, State, Results of {Type, Value}, Error,
// CreatedAt, TTL), with errand's Attempt, ErrorKind, ErrorDetail,
// StartedAt and FinishedAt beside them (machinery ignores them), expiring
// ResultsExpireIn after each write. A group's metadata is machinery's
// GroupMeta JSON at the key named by the group UUID (GroupUUID, TaskUUIDs,
// ChordTriggered, Lock, CreatedAt, TTL).
//
// CompleteGroupMember and ClaimChord are each one script on the server.
// machinery's format has no completion counter (its workers read every
// member's state on each completion), so CompleteGroupMember keeps
// errand's completions in a set beside the meta (GROUP:errand-done) and
// counts a member done when it is in the set or its state is SUCCESS or
// FAILURE, reading the states in the script: O(group size), not O(1), so
// that members completed by machinery workers count. ClaimChord sets machinery's ChordTriggered (and the claimer, in
// ErrandChordClaimer) only while no machinery worker holds
// MachineryChordMutex, so the chord fires once across both fleets.
//
// Single node and Sentinel only: machinery's keys carry no hash tags.
type MachineryBackend struct {
	rdb       goredis.UniversalClient
	scr       goredis.Scripter
	opts      MachineryOptions
	closed    chan struct{}
	closeOnce sync.Once
}

var (
	_ driver.Backend = (*MachineryBackend)(nil)
	_ driver.Expirer = (*MachineryBackend)(nil)
)

// NewMachinery returns a backend on machinery's keys in rdb's database.
func NewMachinery(rdb goredis.UniversalClient, opts *MachineryOptions) *MachineryBackend {
	var o MachineryOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.ResultsExpireIn < 0:
		// 0 below: go-redis's SET without an expiry, and mComplete's
		// "no expiry".
		o.ResultsExpireIn, o.GroupExpiry = 0, 0
	default:
		if o.ResultsExpireIn == 0 {
			o.ResultsExpireIn = time.Hour
		}
		if o.GroupExpiry <= 0 {
			o.GroupExpiry = 24 * time.Hour
		}
		o.GroupExpiry = max(o.GroupExpiry, o.ResultsExpireIn)
	}
	if o.ClaimWait <= 0 {
		o.ClaimWait = 10 * time.Second
	}
	redisconn.Quiet()
	return &MachineryBackend{rdb: rdb, scr: redisconn.NoRetry(rdb), opts: o, closed: make(chan struct{})}
}

// machineryState is machinery's tasks.TaskState as its Redis backend
// encodes it (no JSON tags: Go field names), plus errand's fields.
type machineryState struct {
	TaskUUID  string
	TaskName  string
	State     string
	Results   []machineryResult
	Error     string
	CreatedAt time.Time
	TTL       int64
	// errand's own; machinery ignores them.
	Attempt     int             `json:",omitempty"`
	ErrorKind   string          `json:",omitempty"`
	ErrorDetail string          `json:",omitempty"`
	StartedAt   time.Time       `json:",omitzero"`
	FinishedAt  time.Time       `json:",omitzero"`
	Progress    json.RawMessage `json:",omitempty"` // errand.SetProgress
}

type machineryResult struct {
	Type  string
	Value json.RawMessage
}

// machineryGroup is machinery's tasks.GroupMeta as its Redis backend
// encodes it.
type machineryGroup struct {
	GroupUUID      string
	TaskUUIDs      []string
	ChordTriggered bool
	Lock           bool
	CreatedAt      time.Time
	TTL            int64
}

func toMachinery(st *driver.TaskState) machineryState {
	m := machineryState{TaskUUID: st.TaskUUID, TaskName: st.TaskName, State: string(st.State), Error: st.Error,
		CreatedAt: st.CreatedAt, Attempt: st.Attempt, ErrorKind: st.ErrorKind, ErrorDetail: st.ErrorDetail,
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, Progress: st.Progress}
	if st.State == driver.StateSuccess {
		m.Results = make([]machineryResult, 0, len(st.Results))
	}
	if st.State == driver.StateCancelled { // machinery's FAILURE, marked (machinerycancel.go)
		m.State, m.ErrorKind = string(driver.StateFailure), machineryCancelKind
		if m.Error == "" {
			m.Error = machineryCancelError
		}
	}
	for _, r := range st.Results {
		m.Results = append(m.Results, machineryResult{Type: r.Type, Value: r.Value})
	}
	return m
}

func fromMachinery(b []byte) (*driver.TaskState, error) {
	var m machineryState
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m.State == "" {
		return nil, errors.New("no State: not a task state")
	}
	st := &driver.TaskState{TaskUUID: m.TaskUUID, TaskName: m.TaskName, State: driver.State(m.State), Error: m.Error,
		CreatedAt: m.CreatedAt, Attempt: m.Attempt, ErrorKind: m.ErrorKind, ErrorDetail: m.ErrorDetail,
		StartedAt: m.StartedAt, FinishedAt: m.FinishedAt, Progress: m.Progress}
	if machineryCancelled(&m) {
		st.State = driver.StateCancelled
	}
	for _, r := range m.Results {
		v := r.Value
		if v == nil {
			v = json.RawMessage("null")
		}
		st.Results = append(st.Results, driver.Result{Type: r.Type, Value: v})
	}
	return st, nil
}

// ResultExpiry returns ResultsExpireIn, 0 when states never expire.
func (b *MachineryBackend) ResultExpiry() time.Duration { return b.opts.ResultsExpireIn }

// SetStates writes each state at its task's UUID, in machinery's JSON,
// expiring ResultsExpireIn later, in one pipeline: a PENDING with SET,
// any other state with mSetState, which does not write over a cancelled
// task (driver.Canceller) and then answers an error wrapping
// driver.ErrCancelled for that state. A script the server does not have
// yet is loaded and the states that missed it are written again, in
// order.
func (b *MachineryBackend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	if err := b.isClosed(); err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	errs := make([]error, len(sts))
	cmds := make([]goredis.Cmder, len(sts))
	args := make([][]any, len(sts)) // mSetState's ARGV, for the states it writes
	pipe := b.rdb.Pipeline()
	for i, st := range sts {
		raw, err := json.Marshal(toMachinery(st))
		if err != nil {
			errs[i] = fmt.Errorf("redis machinery backend: encode state of %s: %w", st.TaskUUID, err)
			continue
		}
		if st.State == driver.StatePending {
			cmds[i] = pipe.Set(ctx, st.TaskUUID, raw, b.opts.ResultsExpireIn)
			continue
		}
		args[i] = []any{raw, b.opts.ResultsExpireIn.Milliseconds()}
		cmds[i] = mSetState.EvalSha(ctx, redisconn.NoRetry(pipe), mSetStateKeys(st.TaskUUID), args[i]...)
	}
	_, _ = pipe.Exec(ctx)
	failed := false
	for i, c := range cmds {
		if args[i] != nil && c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT") {
			c = mSetState.Run(ctx, b.scr, mSetStateKeys(sts[i].TaskUUID), args[i]...)
		}
		switch {
		case c == nil:
		case c.Err() != nil:
			errs[i] = fmt.Errorf("redis machinery backend: set state of %s: %w", sts[i].TaskUUID, c.Err())
		case args[i] != nil:
			if n, _ := c.(*goredis.Cmd).Int64(); n == cancelKept {
				errs[i] = fmt.Errorf("redis machinery backend: task %s: %s not written: %w", sts[i].TaskUUID, sts[i].State, driver.ErrCancelled)
			}
		}
		failed = failed || errs[i] != nil
	}
	if !failed {
		return nil
	}
	return errs
}

// GetState reads the task's state, or driver.ErrTaskNotFound.
func (b *MachineryBackend) GetState(ctx context.Context, taskUUID string) (*driver.TaskState, error) {
	if err := b.isClosed(); err != nil {
		return nil, err
	}
	raw, err := b.rdb.Get(ctx, taskUUID).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, driver.ErrTaskNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("redis machinery backend: get state of %s: %w", taskUUID, err)
	}
	st, err := fromMachinery(raw)
	if err != nil {
		return nil, fmt.Errorf("redis machinery backend: state of %s: %w", taskUUID, err)
	}
	return st, nil
}

// InitGroup writes machinery's GroupMeta at the group's UUID.
func (b *MachineryBackend) InitGroup(ctx context.Context, groupUUID string, taskUUIDs []string) error {
	if err := b.isClosed(); err != nil {
		return err
	}
	raw, err := json.Marshal(machineryGroup{GroupUUID: groupUUID, TaskUUIDs: taskUUIDs, CreatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := b.rdb.Set(ctx, groupUUID, raw, b.opts.GroupExpiry).Err(); err != nil {
		return fmt.Errorf("redis machinery backend: init group %s: %w", groupUUID, err)
	}
	return nil
}

// machineryDoneKey is the set of a group's members errand completed,
// beside machinery's group meta.
func machineryDoneKey(groupUUID string) string { return groupUUID + ":errand-done" }

// The scripts' key lists, in their prologues' order (TestScriptPrologues).
func mCompleteKeys(groupUUID string) []string {
	return []string{groupUUID, machineryDoneKey(groupUUID)}
}
func mClaimKeys(groupUUID string) []string { return []string{groupUUID, MachineryChordMutex} }

// mComplete marks the caller done in errand's done set beside the group
// meta and counts the members that are done: in the set (completed by an
// errand worker) or recorded SUCCESS or FAILURE (by a machinery worker,
// which keeps no count). It answers {done, total}, {-1} for an unknown
// group, {-2} for a task that is not a member (nothing written). It reads
// the member state keys the group meta names (machinery's keys are task
// UUIDs, known only once the meta is read).
var mComplete = newScript(`
-- mcomplete
-- KEYS[1] -> GROUP
-- KEYS[2] -> GROUP:errand-done
-- ARGV[1] -> the completing task's UUID, ARGV[2] -> the done set's expiry
-- (ms; 0: none)
local meta_key, done_key = KEYS[1], KEYS[2]
local task, expiry = ARGV[1], tonumber(ARGV[2])
local raw = redis.call('GET', meta_key)
if not raw then return {-1} end
local ok, meta = pcall(cjson.decode, raw)
if not ok or type(meta) ~= 'table' or type(meta.TaskUUIDs) ~= 'table' then return {-1} end
local member = false
for _, id in ipairs(meta.TaskUUIDs) do
  if id == task then member = true break end
end
if not member then return {-2} end
redis.call('SADD', done_key, task)
local ttl = redis.call('PTTL', meta_key)
if ttl > 0 or expiry > 0 then
  redis.call('PEXPIRE', done_key, math.max(ttl, expiry))
end
local done = 0
for _, id in ipairs(meta.TaskUUIDs) do
  if redis.call('SISMEMBER', done_key, id) == 1 then
    done = done + 1
  else
    local s = redis.call('GET', id)
    if s then
      local ok2, st = pcall(cjson.decode, s)
      if ok2 and type(st) == 'table' and (st.State == 'SUCCESS' or st.State == 'FAILURE') then done = done + 1 end
    end
  end
end
return {done, #meta.TaskUUIDs}
`)

// CompleteGroupMember counts taskUUID done and returns how many of the
// group's members are done (completed by errand workers, kept in a set at
// GROUP:errand-done, or recorded SUCCESS or FAILURE by machinery workers)
// and the group size, in one script. A redelivered member counts once.
func (b *MachineryBackend) CompleteGroupMember(ctx context.Context, groupUUID, taskUUID string) (int, int, error) {
	if err := b.isClosed(); err != nil {
		return 0, 0, err
	}
	res, err := mComplete.Run(ctx, b.scr, mCompleteKeys(groupUUID), taskUUID, b.opts.GroupExpiry.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redis machinery backend: complete member %s of group %s: %w", taskUUID, groupUUID, err)
	}
	switch {
	case len(res) == 1 && res[0] == -1:
		return 0, 0, fmt.Errorf("group %s: %w", groupUUID, driver.ErrGroupNotFound)
	case len(res) == 1 && res[0] == -2:
		return 0, 0, fmt.Errorf("task %s, group %s: %w", taskUUID, groupUUID, driver.ErrNotMember)
	case len(res) != 2:
		return 0, 0, fmt.Errorf("redis machinery backend: complete member: answer %v", res)
	}
	return int(res[0]), int(res[1]), nil
}

// mClaim sets machinery's ChordTriggered and errand's ErrandChordClaimer
// on a group meta: 1 won (or won before by this claimer), 0 lost, -1 no
// group, -2 a machinery worker holds its chord lock (try again), -3 a meta
// this script cannot edit.
var mClaim = newScript(`
-- mclaim
-- KEYS[1] -> GROUP
-- KEYS[2] -> TriggerChordMutex
-- ARGV[1] -> the claimer
local meta_key, mutex = KEYS[1], KEYS[2]
local claimer = ARGV[1]
local raw = redis.call('GET', meta_key)
if not raw then return -1 end
local ok, meta = pcall(cjson.decode, raw)
if not ok or type(meta) ~= 'table' then return -3 end
if meta.ChordTriggered == true then
  if meta.ErrandChordClaimer == claimer then return 1 end
  return 0
end
if redis.call('EXISTS', mutex) == 1 then return -2 end
local out, n = string.gsub(raw, '"ChordTriggered":false', '"ChordTriggered":true,"ErrandChordClaimer":' .. cjson.encode(claimer), 1)
if n ~= 1 then return -3 end
redis.call('SET', meta_key, out, 'KEEPTTL')
return 1
`)

// ClaimChord sets the group's ChordTriggered as machinery's TriggerChord
// does, in one script that also records the claimer, so the claimer that
// won wins again. While a machinery worker holds MachineryChordMutex (it
// reads and writes the meta under it) the claim waits, up to ClaimWait.
func (b *MachineryBackend) ClaimChord(ctx context.Context, groupUUID, claimer string) (bool, error) {
	if err := b.isClosed(); err != nil {
		return false, err
	}
	deadline := time.Now().Add(b.opts.ClaimWait)
	for {
		n, err := mClaim.Run(ctx, b.scr, mClaimKeys(groupUUID), claimer).Int64()
		if err != nil {
			return false, fmt.Errorf("redis machinery backend: claim chord of group %s: %w", groupUUID, err)
		}
		switch n {
		case 1:
			return true, nil
		case 0:
			return false, nil
		case -1:
			return false, fmt.Errorf("group %s: %w", groupUUID, driver.ErrGroupNotFound)
		case -3:
			return false, fmt.Errorf("redis machinery backend: group %s: its metadata is not machinery's GroupMeta JSON", groupUUID)
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("redis machinery backend: claim chord of group %s: machinery's %s held for over %s", groupUUID, MachineryChordMutex, b.opts.ClaimWait)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// GroupStates reads the group's member states in group order, in one
// MGET; a member with no state is PENDING.
func (b *MachineryBackend) GroupStates(ctx context.Context, groupUUID string) ([]*driver.TaskState, error) {
	if err := b.isClosed(); err != nil {
		return nil, err
	}
	raw, err := b.rdb.Get(ctx, groupUUID).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("group %s: %w", groupUUID, driver.ErrGroupNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("redis machinery backend: read group %s: %w", groupUUID, err)
	}
	var g machineryGroup
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("redis machinery backend: group %s: %w", groupUUID, err)
	}
	out := make([]*driver.TaskState, len(g.TaskUUIDs))
	if len(g.TaskUUIDs) == 0 {
		return out, nil
	}
	vals, err := b.rdb.MGet(ctx, g.TaskUUIDs...).Result()
	if err != nil {
		return nil, fmt.Errorf("redis machinery backend: read states of group %s: %w", groupUUID, err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if ok {
			if st, err := fromMachinery([]byte(s)); err == nil {
				out[i] = st
				continue
			}
		}
		out[i] = &driver.TaskState{TaskUUID: g.TaskUUIDs[i], State: driver.StatePending}
	}
	return out, nil
}

// Close closes the client if CloseClient is set. A second Close is
// harmless.
func (b *MachineryBackend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		close(b.closed)
		if b.opts.CloseClient {
			err = b.rdb.Close()
		}
	})
	return err
}

func (b *MachineryBackend) isClosed() error {
	select {
	case <-b.closed:
		return driver.ErrClosed
	default:
		return nil
	}
}

package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
	"github.com/errand-go/errand/internal/statejson"
)

// Options configures a Backend.
type Options struct {
	// Prefix starts every key the backend writes. Default: "errand".
	Prefix string
	// ResultExpiry is how long a task's state is kept after its last write.
	// Default: 1h.
	ResultExpiry time.Duration
	// GroupExpiry is how long a group's metadata is kept after its last
	// completion. Default: 24h; never less than ResultExpiry.
	GroupExpiry time.Duration
	// CallTimeout bounds each call to Redis that has no earlier ctx
	// deadline (a blocking fetch waits MaxBlock on top). It takes effect
	// on clients that honour ctx deadlines: ContextTimeoutEnabled, which
	// clients made by Open have; set it on your own. Negative: no bound
	// beyond the client's own timeouts. Default: 10s.
	CallTimeout time.Duration
	// CloseClient: Close also closes the client (set by Open). Default: false.
	CloseClient bool
	// Logger receives go-redis's own log lines (connection errors, pool
	// warnings), at Warn with the attribute component=go-redis. go-redis
	// has one logger per process: errand replaces its stderr logger on the
	// first New or Open of a Redis broker or backend, and its lines go to
	// the most recent non-nil Logger given to either, in any Options.
	// Default: nil, which discards them unless another broker or backend
	// set one.
	Logger *slog.Logger
}

// Backend is a driver.Backend on Redis. It is safe for concurrent use.
type Backend struct {
	rdb goredis.UniversalClient
	// scripts runs the backend's scripts on rdb without go-redis's
	// retries (redisconn.NoRetry; docs/redis.md, Retries).
	scripts goredis.Scripter
	opts    Options
	closed  atomic.Bool
	loc     *redisconn.States // Location's answer
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Expirer = (*Backend)(nil)
)

// New returns a backend on rdb. opts may be nil.
func New(rdb goredis.UniversalClient, opts *Options) *Backend {
	b := &Backend{rdb: rdb, scripts: redisconn.NoRetry(rdb)}
	if opts != nil {
		b.opts = *opts
	}
	redisconn.UseLogger(b.opts.Logger)
	if b.opts.Prefix == "" {
		b.opts.Prefix = "errand"
	}
	b.opts.ResultExpiry, b.opts.GroupExpiry = driver.ExpiryDefaults(b.opts.ResultExpiry, b.opts.GroupExpiry)
	if b.opts.CallTimeout == 0 {
		b.opts.CallTimeout = defaultCallTimeout
	}
	b.loc = &redisconn.States{Client: rdb, Prefix: b.opts.Prefix, Expiry: b.opts.ResultExpiry}
	return b
}

// defaultCallTimeout is the default of Options.CallTimeout.
const defaultCallTimeout = 10 * time.Second

func init() {
	driver.RegisterBackend("redis", Open)
	driver.RegisterBackend("rediss", Open)
	driver.RegisterBackend("redis-sentinel", Open)
	driver.RegisterBackend("rediss-sentinel", Open)
}

// Open returns a backend for a redis://, rediss://, redis-sentinel:// or
// rediss-sentinel:// URL (see the package doc). The backend owns the client it makes.
func Open(ctx context.Context, u *url.URL) (driver.Backend, error) {
	rdb, own, err := redisconn.Open(ctx, u, "prefix", "result_expiry", "group_expiry", "timeout", "format")
	if err != nil {
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	opts := &Options{CloseClient: true, Prefix: own.Get("prefix")}
	// result_expiry=never: machinery's format only (results_expire_in < 0).
	never := own.Get("result_expiry") == "never" && own.Get("format") == "machinery"
	if never {
		own.Del("result_expiry")
	}
	if err := driver.DurationParams(own, map[string]*time.Duration{"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry, "timeout": &opts.CallTimeout}); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	switch own.Get("format") {
	case "":
	case "machinery":
		// machinery's keys carry no hash tags: one node or Sentinel.
		if _, ok := rdb.(*goredis.ClusterClient); ok {
			rdb.Close()
			return nil, errors.New("redis backend: format=machinery needs a single node or Sentinel (machinery's keys carry no hash tags)")
		}
		mo := &MachineryOptions{ResultsExpireIn: opts.ResultExpiry, GroupExpiry: opts.GroupExpiry, CloseClient: true}
		if never {
			mo.ResultsExpireIn = -1
		}
		return NewMachinery(rdb, mo), nil
	default:
		rdb.Close()
		return nil, fmt.Errorf("redis backend: format %q is not known (only format=machinery)", own.Get("format"))
	}
	return New(rdb, opts), nil
}

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

// The keys (G = {prefix:group:GROUP}, one hash tag per group, so each
// group script runs on one slot of a cluster):
//
//	prefix:task:UUID  string  the task's state (JSON), expiring ResultExpiry
//	                          after its last write
//	G:meta     hash  "total" -> the group's size; "m:UUID" -> 1 per member;
//	                 "claimer" -> the chord's claimer, once claimed
//	G:members  list  member UUIDs in group order
//	G:done     set   the completed members
//
// Each script opens with a prologue that names its KEYS and ARGV (-- KEYS[1]
// -> G:meta) and binds them to locals; the Go helper beside it builds its
// KEYS in that order (TestScriptPrologues checks that they agree).

func (b *Backend) taskKey(id string) string { return b.opts.Prefix + ":task:" + id }

type groupKeys struct{ meta, members, done string }

func (b *Backend) groupKeys(g string) groupKeys {
	k := "{" + b.opts.Prefix + ":group:" + g + "}:"
	return groupKeys{k + "meta", k + "members", k + "done"}
}

// scripts holds every script of the package with its text, for the test
// of prologues; newScript makes one of its parts: its prologue, the
// snippets it uses, its body. Both are used only while the package
// initialises.
var (
	scripts   redisconn.Scripts
	newScript = scripts.New
)

func (b *Backend) err(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, goredis.ErrClosed) || b.closed.Load():
		return fmt.Errorf("redis backend: %w", driver.ErrClosed)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("redis backend: %w", err)
}

// SetStates writes sts in order, one alone and many in one pipeline
// (split per node on a cluster): a PENDING with SET ... PX, any other
// state with setStateScript, which does not write over a CANCELLED task
// (driver.Canceller) and then answers an error wrapping
// driver.ErrCancelled for that state. A state that cannot be encoded, or
// whose command fails, fails alone. A script the server does not have
// yet is loaded and the states that missed it are written again, in
// order.
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	return b.setStates(ctx, sts, false)
}

// setStates writes sts as SetStates does, or with SET ... NX PX (leaving a
// state already there) when nx: one alone, many in one pipeline. It
// answers one error per state, or nil when every one succeeded.
func (b *Backend) setStates(ctx context.Context, sts []*driver.TaskState, nx bool) []error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(sts))
		}
		errs[i] = err
	}
	scripted := func(st *driver.TaskState) bool { return !nx && st.State != driver.StatePending }
	if len(sts) == 1 && !nx {
		v, err := statejson.Marshal(sts[0])
		if err != nil {
			return []error{fmt.Errorf("redis backend: encode state of %s: %w", sts[0].TaskUUID, err)}
		}
		if !scripted(sts[0]) {
			if err := b.rdb.Set(ctx, b.taskKey(sts[0].TaskUUID), v, b.opts.ResultExpiry).Err(); err != nil {
				return []error{b.err(ctx, err)}
			}
			return nil
		}
		n, err := setStateScript.Run(ctx, b.scripts, b.setStateKeys(sts[0].TaskUUID), v, b.opts.ResultExpiry.Milliseconds()).Int64()
		switch {
		case err != nil:
			return []error{b.err(ctx, err)}
		case n == cancelKept:
			return []error{keptErr(sts[0])}
		}
		return nil
	}
	pipe := b.rdb.Pipeline()
	var queued []int   // the index in sts of each command queued
	var script [][]any // per state written by setStateScript, its ARGV
	var scmds []*goredis.Cmd
	for i, st := range sts {
		if scripted(st) {
			v, err := statejson.Marshal(st)
			if err != nil {
				fail(i, fmt.Errorf("redis backend: encode state of %s: %w", st.TaskUUID, err))
				continue
			}
			if script == nil {
				script, scmds = make([][]any, len(sts)), make([]*goredis.Cmd, len(sts))
			}
			script[i] = []any{v, b.opts.ResultExpiry.Milliseconds()}
			scmds[i] = setStateScript.EvalSha(ctx, redisconn.NoRetry(pipe), b.setStateKeys(st.TaskUUID), script[i]...)
		} else if err := b.loc.QueueStates(ctx, pipe, sts[i:i+1], nx); err != nil {
			fail(i, fmt.Errorf("redis backend: %w", err))
			continue
		}
		queued = append(queued, i)
	}
	if len(queued) == 0 {
		return errs
	}
	cmds, execErr := pipe.Exec(ctx) // errors are read per command below
	if len(cmds) != len(queued) {
		return driver.BatchErrors(len(sts), b.err(ctx, fmt.Errorf("pipeline answered %d replies for %d commands", len(cmds), len(queued))))
	}
	for j, c := range cmds {
		i := queued[j]
		var a []any // setStateScript's ARGV, when it wrote sts[i]
		if script != nil && script[i] != nil {
			a, c = script[i], scmds[i] // the script's own command, not the pipeline's wrapper of it
			if c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT") {
				c = setStateScript.Run(ctx, b.scripts, b.setStateKeys(sts[i].TaskUUID), a...)
			}
		}
		err := c.Err()
		if err == nil && execErr != nil && !setReplied(c) {
			// A command the failed pipeline left with neither a reply nor
			// an error of its own was not written.
			err = execErr
		}
		switch {
		case err != nil && err != goredis.Nil:
			fail(i, b.err(ctx, err))
		case a != nil:
			if n, _ := c.(*goredis.Cmd).Int64(); n == cancelKept {
				fail(i, keptErr(sts[i]))
			}
		}
	}
	return errs
}

// setReplied reports whether c, a SET (OK), a SET NX (true or false) or
// a setStateScript (a number), carries the server's reply. A SET NX
// always counts as answered: false is its reply "not set", and its
// failure carries its own error.
func setReplied(c goredis.Cmder) bool {
	switch c := c.(type) {
	case *goredis.StatusCmd:
		return c.Val() != ""
	case *goredis.Cmd:
		return c.Val() != nil
	}
	return true
}

func decodeState(id string, v string) (*driver.TaskState, error) {
	var st driver.TaskState
	if err := statejson.Unmarshal(v, &st); err != nil {
		return nil, fmt.Errorf("redis backend: decode state of %s: %w", id, err)
	}
	return &st, nil
}

// GetState reads the task's state.
func (b *Backend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	v, err := b.rdb.Get(ctx, b.taskKey(id)).Result()
	if err == goredis.Nil {
		return nil, fmt.Errorf("redis backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	if err != nil {
		return nil, b.err(ctx, err)
	}
	return decodeState(id, v)
}

// initGroupScript records a group afresh: its size ("total"), one field
// "m:UUID" per member in G:meta (for the completion's membership check)
// and its members in order in G:members, with no member done.
var initGroupScript = newScript(`
-- initGroup
-- KEYS[1] -> G:meta
-- KEYS[2] -> G:members
-- KEYS[3] -> G:done
-- ARGV[1]   -> expiry (ms)
-- ARGV[1+i] -> UUID of member i (i = 1, 2, ...)
local meta, members, done = KEYS[1], KEYS[2], KEYS[3]
local expiry = ARGV[1]
local CHUNK = 1000 -- members per RPUSH and HSET: unpack's stack is bounded
redis.call('DEL', meta, members, done)
for i = 2, #ARGV, CHUNK do
  local j = math.min(i + CHUNK - 1, #ARGV)
  redis.call('RPUSH', members, unpack(ARGV, i, j))
  local fields = {}
  for k = i, j do
    fields[#fields + 1] = 'm:' .. ARGV[k]
    fields[#fields + 1] = 1
  end
  redis.call('HSET', meta, unpack(fields))
end
redis.call('HSET', meta, 'total', #ARGV - 1)
redis.call('PEXPIRE', meta, expiry)
redis.call('PEXPIRE', members, expiry)
return 1
`)

// groupScriptKeys are the keys of initGroupScript and completeScript.
func (b *Backend) groupScriptKeys(g string) []string {
	k := b.groupKeys(g)
	return []string{k.meta, k.members, k.done}
}

// InitGroup records the members in order, atomically.
func (b *Backend) InitGroup(ctx context.Context, g string, ids []string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	args := make([]any, 0, len(ids)+1)
	args = append(args, b.opts.GroupExpiry.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	return b.err(ctx, initGroupScript.Run(ctx, b.scripts, b.groupScriptKeys(g), args...).Err())
}

// What the group scripts answer instead of a count or a claim.
const (
	groupUnknown = -1 // completeScript, claimScript: the group has no G:meta
	notMember    = -2 // completeScript: the UUID is not a member
)

// luaGroupAnswers names groupUnknown and notMember in Lua.
var luaGroupAnswers = fmt.Sprintf(`
local GROUP_UNKNOWN, NOT_MEMBER = %d, %d
`, groupUnknown, notMember)

// completeScript marks a member done and extends the group's life.
// Returns {members done, total}, {GROUP_UNKNOWN, 0}, or {NOT_MEMBER,
// total} having changed nothing.
var completeScript = newScript(`
-- complete
-- KEYS[1] -> G:meta
-- KEYS[2] -> G:members
-- KEYS[3] -> G:done
-- ARGV[1] -> member UUID
-- ARGV[2] -> expiry (ms)
local meta, members, done = KEYS[1], KEYS[2], KEYS[3]
local id, expiry = ARGV[1], ARGV[2]
`, luaGroupAnswers, `
local total = redis.call('HGET', meta, 'total')
if not total then return {GROUP_UNKNOWN, 0} end
if redis.call('HEXISTS', meta, 'm:' .. id) == 0 then return {NOT_MEMBER, tonumber(total)} end
redis.call('SADD', done, id)
for _, key in ipairs({meta, members, done}) do redis.call('PEXPIRE', key, expiry) end
return {redis.call('SCARD', done), tonumber(total)}
`)

// CompleteGroupMember marks the member done (idempotent, O(1)) and extends
// the group's life. A UUID that is not a member (no "m:ID" field in the
// group's hash) changes nothing and returns driver.ErrNotMember; the check
// and the count are one script, so nothing can slip between them.
func (b *Backend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	r, err := completeScript.Run(ctx, b.scripts, b.groupScriptKeys(g), id, b.opts.GroupExpiry.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, b.err(ctx, err)
	}
	switch r[0] {
	case groupUnknown:
		return 0, 0, fmt.Errorf("redis backend: group %s: %w", g, driver.ErrGroupNotFound)
	case notMember:
		return 0, 0, fmt.Errorf("redis backend: task %s, group %s: %w", id, g, driver.ErrNotMember)
	}
	return int(r[0]), int(r[1]), nil
}

// claimWon is claimScript's answer when the claimer now stored is the
// caller (0: another claimer's; GROUP_UNKNOWN).
const claimWon = 1

// claimScript sets the chord's claimer unless one is set. Returns
// CLAIM_WON when the claimer stored is the caller, 0 when it is another,
// GROUP_UNKNOWN.
var claimScript = newScript(`
-- claim
-- KEYS[1] -> G:meta
-- ARGV[1] -> claimer
local meta = KEYS[1]
local claimer = ARGV[1]
`, luaGroupAnswers, fmt.Sprintf(`
local CLAIM_WON = %d
`, claimWon), `
if redis.call('EXISTS', meta) == 0 then return GROUP_UNKNOWN end
local c = redis.call('HGET', meta, 'claimer')
if not c then
  redis.call('HSET', meta, 'claimer', claimer)
  return CLAIM_WON
end
if c == claimer then return CLAIM_WON end
return 0
`)

// claimKeys are the keys of claimScript.
func (b *Backend) claimKeys(g string) []string { return []string{b.groupKeys(g).meta} }

// ClaimChord is a compare-and-set on the group's claimer.
func (b *Backend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	n, err := claimScript.Run(ctx, b.scripts, b.claimKeys(g), claimer).Int()
	if err != nil {
		return false, b.err(ctx, err)
	}
	if n == groupUnknown {
		return false, fmt.Errorf("redis backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	return n == claimWon, nil
}

// GroupStates reads the member list, then all member states in one
// pipeline (split per node on a cluster).
func (b *Backend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ids, err := b.rdb.LRange(ctx, b.groupKeys(g).members, 0, -1).Result()
	if err != nil {
		return nil, b.err(ctx, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("redis backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	pipe := b.rdb.Pipeline()
	cmds := make([]*goredis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, b.taskKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != goredis.Nil {
		return nil, b.err(ctx, err)
	}
	out := make([]*driver.TaskState, len(ids))
	for i, c := range cmds {
		v, err := c.Result()
		if err == goredis.Nil {
			out[i] = &driver.TaskState{TaskUUID: ids[i], State: driver.StatePending}
			continue
		}
		if err != nil {
			return nil, b.err(ctx, err)
		}
		if out[i], err = decodeState(ids[i], v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Close makes later calls return driver.ErrClosed; it closes the client only
// if Options.CloseClient.
func (b *Backend) Close() error {
	if b.closed.Swap(true) || !b.opts.CloseClient {
		return nil
	}
	return b.rdb.Close()
}

// bound returns ctx limited to CallTimeout (see Options.CallTimeout).
//
// A ctx whose own deadline comes first (errand bounds each step of a
// task by its own CallTimeout) is returned as it is: a second timer
// could only fire later.
func (b *Backend) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.opts.CallTimeout < 0 {
		return ctx, noCancel
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.opts.CallTimeout {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

func noCancel() {}

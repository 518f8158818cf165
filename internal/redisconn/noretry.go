package redisconn

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// Processor is what NoRetry wraps: a client (any UniversalClient) or a
// pipeline (Pipeliner), both of which run or queue any command.
type Processor interface {
	goredis.Scripter
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// NoRetry returns a Scripter on c whose EVAL and EVALSHA commands go-redis
// never sends a second time once the first was written: they carry
// go-redis's per-command NoRetry flag, which the single-node, Sentinel,
// cluster and ring clients and their pipelines all honour. A network
// error or a read timeout after the command went out is returned as it
// is, instead of being retried under the client's MaxRetries (3 by
// default) — a retry that would run a script a second time when the first
// run's reply was merely slow (a fetch leasing the next messages while the
// first lease is orphaned, a publish storing its messages twice). A
// failure before the command was written (go-redis's "pre-write" desync)
// is still replayed, since that is its first run; so is a redirect on a
// cluster (MOVED, ASK: the node did not run it).
//
// It takes effect on every client, whatever its Options: errand's Redis
// drivers run every script through it, on the clients they build from
// URLs and on clients users hand in alike, without changing the client or
// opening a second pool. Plain commands (SET, SADD, HGET, ...), which
// errand only sends where running twice is harmless, keep the client's
// retries. ScriptExists and ScriptLoad are passed through.
func NoRetry(c Processor) goredis.Scripter { return noRetry{c} }

type noRetry struct{ c Processor }

// noRetryCmd is a *goredis.Cmd that go-redis never sends twice.
type noRetryCmd struct{ *goredis.Cmd }

// NoRetry reports true: see redisconn.NoRetry.
func (noRetryCmd) NoRetry() bool { return true }

// The commands' names, boxed once (a string boxed per call is an
// allocation per call).
var (
	cmdEval      any = "eval"
	cmdEvalSha   any = "evalsha"
	cmdEvalRO    any = "eval_ro"
	cmdEvalShaRO any = "evalsha_ro"
)

func (n noRetry) eval(ctx context.Context, name any, payload string, keys []string, args []any) *goredis.Cmd {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = name, payload, len(keys)
	for i, k := range keys {
		cmdArgs[3+i] = k
	}
	if len(args) == 1 { // go-redis flattens one slice argument; so do we
		switch a := args[0].(type) {
		case []any:
			args = a
		case []string:
			args = make([]any, len(a))
			for i, s := range a {
				args[i] = s
			}
		}
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := goredis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // a cluster routes the script by its first key
	}
	if err := n.c.Process(ctx, noRetryCmd{cmd}); IsNoPerm(err) {
		cmd.SetErr(PermErr(cmd, err)) // run at once, not queued on a pipeline
	}
	return cmd
}

func (n noRetry) Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return n.eval(ctx, cmdEval, script, keys, args)
}

func (n noRetry) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	return n.eval(ctx, cmdEvalSha, sha1, keys, args)
}

func (n noRetry) EvalRO(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return n.eval(ctx, cmdEvalRO, script, keys, args)
}

func (n noRetry) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	return n.eval(ctx, cmdEvalShaRO, sha1, keys, args)
}

func (n noRetry) ScriptExists(ctx context.Context, hashes ...string) *goredis.BoolSliceCmd {
	return n.c.ScriptExists(ctx, hashes...)
}

func (n noRetry) ScriptLoad(ctx context.Context, script string) *goredis.StringCmd {
	return n.c.ScriptLoad(ctx, script)
}

// Once returns cmd with go-redis's NoRetry flag, as NoRetry gives the
// scripts: a pipeline or a transaction (MULTI ... EXEC) holding it is
// never sent a second time once written, so a slow reply cannot make it
// run twice. (go-redis v9.23 resends no transaction after its write
// anyway; Once makes the promise errand's, not a version's.)
func Once(cmd *goredis.Cmd) goredis.Cmder { return noRetryCmd{cmd} }

package redisconn

import (
	"context"
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestTxErrReportsTheRefusal: a transaction Redis discarded (EXECABORT)
// because it refused one command as queued (NOPERM) fails with that
// refusal, naming the command and its key, and still wraps the EXECABORT;
// a refused script names its KEYS; other errors pass as they are.
func TestTxErrReportsTheRefusal(t *testing.T) {
	ctx := context.Background()
	execAbort := errors.New("EXECABORT Transaction discarded because of previous errors.")
	noPerm := errors.New("NOPERM this user has no permissions to access one of the keys used as arguments")
	hset := goredis.NewCmd(ctx, "hset", "{p:q}:msgs", "m", "env")
	hset.SetErr(execAbort)
	sadd := goredis.NewIntCmd(ctx, "sadd", "{p}:queues", "q")
	sadd.SetErr(noPerm)
	err := TxErr([]goredis.Cmder{hset, sadd}, execAbort)
	if !errors.Is(err, execAbort) || !errors.Is(err, noPerm) {
		t.Errorf("TxErr: %v does not wrap both the EXECABORT and the NOPERM", err)
	}
	var pe *PermError
	if !errors.As(err, &pe) || pe.Command != "SADD" || len(pe.Keys) != 1 || pe.Keys[0] != "{p}:queues" {
		t.Errorf("TxErr: %v; want a *PermError of SADD on {p}:queues", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "NOPERM") || !strings.Contains(msg, "SADD of the key {p}:queues") {
		t.Errorf("TxErr's message %q does not lead with NOPERM and name the key", msg)
	}
	if other := errors.New("EXECABORT"); TxErr([]goredis.Cmder{hset}, other) != other {
		t.Error("TxErr changed an EXECABORT with no refused command")
	}
	if plain := errors.New("i/o timeout"); TxErr([]goredis.Cmder{sadd}, plain) != plain {
		t.Error("TxErr changed an error that is not EXECABORT")
	}
	script := goredis.NewCmd(ctx, "evalsha", "abc", 2, "{p:q}:pending", "{p:q}:msgs", "arg")
	err = PermErr(script, noPerm)
	if !errors.As(err, &pe) || pe.Command != "EVALSHA" || strings.Join(pe.Keys, " ") != "{p:q}:pending {p:q}:msgs" || !errors.Is(err, noPerm) {
		t.Errorf("PermErr of a script: %v; want a *PermError naming its two KEYS", err)
	}
	if plain := errors.New("ERR"); PermErr(script, plain) != plain {
		t.Error("PermErr changed an error that is not NOPERM")
	}
}

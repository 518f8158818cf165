package redisconn

import (
	"context"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// countScript counts its runs.
var countScript = goredis.NewScript(`return redis.call('INCR', KEYS[1])`)

// TestNoRetryRunsOnce: a script whose reply comes after the read timeout
// runs once through NoRetry (alone, in a pipeline), and a transaction
// holding a command marked Once runs once, on a client that retries (MaxRetries 3), where
// the plain client runs it four times. The promise: no errand script runs
// twice by accident (docs/redis.md, Retries).
func TestNoRetryRunsOnce(t *testing.T) {
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		if os.Getenv("ERRAND_REQUIRE_SERVICES") == "1" {
			t.Fatal("ERRAND_REDIS_URL is not set (scripts/services start exports it)")
		}
		t.Skip("ERRAND_REDIS_URL is not set")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	key := "errand-test:noretry:" + time.Now().Format("150405.000000000")
	o.MaxRetries = 3
	o.ReadTimeout = 200 * time.Millisecond
	o.Dialer = redistest.SlowLink{Late: []byte(key)}.Dial
	slow := goredis.NewClient(o)
	defer slow.Close()
	ctx := context.Background()
	if err := slow.Ping(ctx).Err(); err != nil {
		if os.Getenv("ERRAND_REQUIRE_SERVICES") == "1" {
			t.Fatalf("Redis unreachable: %v", err)
		}
		t.Skipf("Redis unreachable: %v", err)
	}
	fast := goredis.NewClient(&goredis.Options{Addr: o.Addr, DB: o.DB, Username: o.Username, Password: o.Password})
	defer fast.Close()
	defer fast.Del(ctx, key, key+":plain")
	countScript.Load(ctx, fast)

	if err := countScript.Run(ctx, NoRetry(slow), []string{key}).Err(); err == nil {
		t.Fatal("a reply later than the read timeout: want a timeout error from the script call, got none")
	}
	if n, _ := fast.Get(ctx, key).Int(); n != 1 {
		t.Errorf("a script whose reply was late ran %d times through NoRetry; want exactly 1 (go-redis must not send it again)", n)
	}

	// The pipeline path too: a pipeline holding a NoRetry script is not
	// sent again.
	pipe := slow.Pipeline()
	countScript.EvalSha(ctx, NoRetry(pipe), []string{key})
	if _, err := pipe.Exec(ctx); err == nil {
		t.Fatal("a pipeline whose reply was late: want a timeout error, got none")
	}
	if n, _ := fast.Get(ctx, key).Int(); n != 2 {
		t.Errorf("after one more pipelined run with a late reply the count is %d; want 2 (one run per call)", n)
	}

	// A transaction (MULTI ... EXEC, the publish's) holding a command
	// marked Once is not sent again either.
	tx := slow.TxPipeline()
	tx.Process(ctx, Once(goredis.NewCmd(ctx, "incr", key)))
	tx.Incr(ctx, key)
	if _, err := tx.Exec(ctx); err == nil {
		t.Fatal("a transaction whose reply was late: want a timeout error, got none")
	}
	if n, _ := fast.Get(ctx, key).Int(); n != 4 {
		t.Errorf("after one transaction of two INCRs with a late reply the count is %d; want 4 (the transaction ran once)", n)
	}
	// (go-redis v9.23 itself does not resend a transaction whose reply
	// was late, with or without Once; Once keeps that true whatever the
	// version, as NoRetry does for scripts.)

	// The control: the same call on the plain client runs more than once,
	// which is what NoRetry exists to prevent.
	plain := key + ":plain"
	countScript.Run(ctx, slow, []string{plain})
	if n, _ := fast.Get(ctx, plain).Int(); n < 2 {
		t.Errorf("control: without NoRetry the script ran %d times ; the test's slow link no longer makes go-redis retry, so it proves nothing", n)
	}
}

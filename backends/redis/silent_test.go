package redisbackend_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/conformance"
)

// TestSilentServer: with redis-server accepting connections but never
// answering (a stalled proxy), every backend call and OpenBackend return an
// error by the caller's ctx deadline, or without one within the client's
// timeouts and retries (silentCallTimeout).
func TestSilentServer(t *testing.T) {
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL is not set (scripts/services start exports it)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: o.Addr,
		Backend: func(t testing.TB, addr string) errand.Backend {
			rdb := goredis.NewClient(&goredis.Options{Addr: addr, DB: o.DB, ContextTimeoutEnabled: true})
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test", CloseClient: true, CallTimeout: silentCallTimeout})
			t.Cleanup(func() { b.Close() })
			return b
		},
		BackendURL: func(addr string) string {
			return fmt.Sprintf("redis://%s/%d?prefix=errand-test&timeout=2s", addr, o.DB)
		},
		CallTimeout: silentCallTimeout,
	})
}

// silentCallTimeout is the drivers' per-call timeout in this test
// (Options.CallTimeout, timeout= in URLs): it bounds a call without a ctx
// deadline on a silent server, whatever go-redis's own timeouts and retries
// (with its defaults a pipelined Publish took 35s before CallTimeout).
const silentCallTimeout = 2 * time.Second

package redisbackend_test

import (
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestSilentServer: with redis-server accepting connections but never
// answering (a stalled proxy), every backend call and OpenBackend return an
// error by the caller's ctx deadline, or without one within the client's
// timeouts and retries (redistest.SilentCallTimeout).
func TestSilentServer(t *testing.T) {
	o := redistest.URLOptions(t)
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: o.Addr,
		Backend: func(t testing.TB, addr string) errand.Backend {
			rdb := goredis.NewClient(&goredis.Options{Addr: addr, DB: o.DB, ContextTimeoutEnabled: true})
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test", CloseClient: true, CallTimeout: redistest.SilentCallTimeout})
			t.Cleanup(func() { b.Close() })
			return b
		},
		BackendURL: func(addr string) string {
			return fmt.Sprintf("redis://%s/%d?prefix=errand-test&timeout=2s", addr, o.DB)
		},
		CallTimeout: redistest.SilentCallTimeout,
	})
}

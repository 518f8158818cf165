package redisbroker_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

// TestSilentServer: with redis-server accepting connections but never
// answering (a stalled proxy), every broker call and OpenBroker return an
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
		Broker: func(t testing.TB, addr string) errand.Broker {
			rdb := goredis.NewClient(&goredis.Options{Addr: addr, DB: o.DB, ContextTimeoutEnabled: true,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1})
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test", CloseClient: true})
			t.Cleanup(func() { b.Close() })
			return b
		},
		BrokerURL: func(addr string) string {
			return fmt.Sprintf("redis://%s/%d?prefix=errand-test&dial_timeout=1s&read_timeout=1s&write_timeout=1s&max_retries=1", addr, o.DB)
		},
		CallTimeout: silentCallTimeout,
	})
}

// silentCallTimeout bounds a call without a ctx deadline on a silent
// server for a client with 1s dial/read/write timeouts and one retry: go-redis
// has no per-call timeout of its own, so its timeouts and retries are the
// bound (see docs/redis.md; with go-redis's defaults a pipelined Publish
// took 35s).
const silentCallTimeout = 4 * time.Second

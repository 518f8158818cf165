package redisbroker_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestShutdownWhileServerSilent: a worker's Shutdown returns by its deadline
// while redis-server accepts but never answers (a proxy that stops
// forwarding), and its tasks are finished by another worker afterwards.
func TestShutdownWhileServerSilent(t *testing.T) {
	o := redistest.URLOptions(t)
	conformance.RunShutdownSilentServer(t, conformance.SilentServerHarness{
		Target: o.Addr,
		Broker: func(t testing.TB, addr string) errand.Broker {
			rdb := goredis.NewClient(&goredis.Options{Addr: addr, DB: o.DB, ContextTimeoutEnabled: true})
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test", CloseClient: true})
			t.Cleanup(func() { b.Close() })
			return b
		},
	})
}

package redisbackend_test

// The kit's restart scenario on a private redis-server with an append-only
// file: states, group counters and chord claims survive, so the chord
// completes with every member's result.

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

func TestServerRestart(t *testing.T) {
	addr, server := redistest.PrivateServer(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   conformance.MemoryBroker(memorybroker.Options{}),
		Backend:  harness(rdb),
		Restarts: conformance.RestartsBackend,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

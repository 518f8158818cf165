package redisbroker_test

// The kit's fault scenarios on real processes: a worker process SIGKILLed
// mid-task (on the shared single-node server), and a private redis-server
// (AOF on) restarted mid-chord under running workers.

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

func singleServer(t *testing.T) goredis.UniversalClient {
	for name, c := range servers(t) {
		if name == "Single" {
			return c
		}
	}
	t.Fatal("no single-node server")
	return nil
}

// TestWorkerKilled re-runs this test binary as worker processes (see
// conformance.RunWorkerKilled): everything here runs in them too.
func TestWorkerKilled(t *testing.T) {
	conformance.RunWorkerKilled(t, harness(singleServer(t)))
}

// TestServerRestart restarts a private redis-server with an append-only
// file fsynced on every write: the broker declares Durable, so nothing may
// be lost.
func TestServerRestart(t *testing.T) {
	addr, server := redistest.PrivateServer(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   harness(rdb),
		Backend:  conformance.MemoryBackend(),
		Restarts: conformance.RestartsBroker,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

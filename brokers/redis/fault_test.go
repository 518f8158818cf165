package redisbroker_test

// The kit's fault scenarios on real processes: a worker process SIGKILLed
// mid-task (on the shared single-node server), and a private redis-server
// (AOF on) restarted mid-chord under running workers.

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/conformance"
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
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		conformance.ServiceUnavailable(t, "redis-server not installed (scripts/services start installs it)")
	}
	addr, dir := conformance.FreeAddr(t), t.TempDir()
	host, port, _ := strings.Cut(addr, ":")
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "--port", port, "--bind", host, "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
	}, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   harness(rdb),
		Backend:  conformance.MemoryBackend(),
		Restarts: conformance.RestartsBroker,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

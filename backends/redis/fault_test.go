package redisbackend_test

// The kit's restart scenario on a private redis-server with an append-only
// file: states, group counters and chord claims survive, so the chord
// completes with every member's result.

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
)

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
		Broker:   conformance.MemoryBroker(memorybroker.Options{}),
		Backend:  harness(rdb),
		Restarts: conformance.RestartsBackend,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

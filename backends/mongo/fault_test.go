package mongobackend_test

// The kit's restart scenario on a private FerretDB: the database restarts
// mid-chord; its state survives on disk, the driver reconnects, and the
// chord completes with every member's result.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	gomongo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
)

// ferretdb returns the FerretDB binary scripts/services builds and caches.
func ferretdb(t *testing.T) string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	bin := filepath.Join(cache, "errand", "ferretdb-v1.24.0", "ferretdb")
	if _, err := os.Stat(bin); err != nil {
		conformance.ServiceUnavailable(t, "FerretDB not built (scripts/services start builds it): "+err.Error())
	}
	return bin
}

func TestServerRestart(t *testing.T) {
	bin := ferretdb(t)
	addr, dir := conformance.FreeAddr(t), t.TempDir()
	c, err := gomongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/?maxPoolSize=1").SetTimeout(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Disconnect(context.Background()) })
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "--listen-addr="+addr, "--handler=sqlite", "--sqlite-url=file:"+dir+"/",
			"--state-dir="+dir, "--debug-addr=-", "--telemetry=disable", "--log-level=error")
	}, func(ctx context.Context) error { return c.Ping(ctx, nil) })
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   conformance.MemoryBroker(memorybroker.Options{}),
		Backend:  harness(c),
		Restarts: conformance.RestartsBackend,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

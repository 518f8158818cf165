package mongobackend_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	gomongo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand"
	mongobackend "github.com/errand-go/errand/backends/mongo"
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

// TestServerRestartDuringChord restarts the database while a chord is in
// flight: its state survives on disk, the driver reconnects, and the chord
// completes with every member's result.
func TestServerRestartDuringChord(t *testing.T) {
	bin := ferretdb(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--listen-addr="+addr, "--handler=sqlite", "--sqlite-url=file:"+dir+"/",
			"--state-dir="+dir, "--debug-addr=-", "--telemetry=disable", "--log-level=error")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	server := start()
	defer func() { server.Process.Kill(); server.Wait() }()
	c, err := gomongo.Connect(options.Client().ApplyURI(fmt.Sprintf("mongodb://%s/?maxPoolSize=1", addr)).SetTimeout(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitUp(t, ctx, c)
	be, err := mongobackend.New(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: be})
	release := make(chan struct{})
	srv.Register("member", func(i int) (int, error) { <-release; return i * i, nil })
	srv.Register("sum", func(xs ...int) (int, error) {
		total := 0
		for _, x := range xs {
			total += x
		}
		return total, nil
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, ErrorBackoff: 100 * time.Millisecond})
	w.Start()
	defer w.Shutdown(context.Background())
	var sigs []*errand.Signature
	for i := range 10 {
		sigs = append(sigs, errand.NewSignature("member", i))
	}
	g, _ := errand.NewGroup(sigs...)
	ch, _ := errand.NewChord(g, errand.NewSignature("sum"))
	r, err := srv.SendChord(ctx, ch, 1)
	if err != nil {
		t.Fatal(err)
	}
	server.Process.Signal(syscall.SIGTERM)
	server.Wait()
	server = start()
	waitUp(t, ctx, c)
	close(release)
	var total int
	if err := r.GetInto(ctx, &total); err != nil || total != 285 {
		t.Fatalf("chord across a database restart: %d, %v; want 285 (nothing lost)", total, err)
	}
}

func waitUp(t *testing.T, ctx context.Context, c *gomongo.Client) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx, nil)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("database did not come up: %v", err)
		case <-tick.C:
		}
	}
}

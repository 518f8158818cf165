package memcachebackend_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/errand-go/errand"
	memcachebackend "github.com/errand-go/errand/backends/memcache"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// client returns a client of the servers in ERRAND_MEMCACHE_ADDRS.
func client(t *testing.T) *gomemcache.Client {
	addrs := os.Getenv("ERRAND_MEMCACHE_ADDRS")
	if addrs == "" {
		conformance.ServiceUnavailable(t, "ERRAND_MEMCACHE_ADDRS is not set (scripts/services start exports it)")
	}
	mc := gomemcache.New(strings.Split(addrs, ",")...)
	if err := mc.Ping(); err != nil {
		conformance.ServiceUnavailable(t, "memcached unreachable: "+err.Error())
	}
	t.Cleanup(func() { mc.Close() })
	return mc
}

func harness(mc *gomemcache.Client) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := memcachebackend.New(mc, &memcachebackend.Options{Prefix: "errand-test", ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 2 * time.Second, Lossy: true},
	}
}

func TestConformance(t *testing.T) {
	mc := client(t)
	conformance.RunBackend(t, harness(mc))
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), harness(mc))
}

func TestOversizedStateFailsClearly(t *testing.T) {
	b := memcachebackend.New(client(t), &memcachebackend.Options{Prefix: "errand-test"})
	st := &errand.TaskState{TaskUUID: errand.NewUUID(), State: errand.StateSuccess,
		Results: []errand.Result{{Type: "string", Value: []byte(`"` + strings.Repeat("x", 2<<20) + `"`)}}}
	err := b.SetState(context.Background(), st)
	if err == nil || !strings.Contains(err.Error(), "item size limit") {
		t.Fatalf("SetState of a 2 MiB state = %v, want a clear size error", err)
	}
}

func TestOpenByURL(t *testing.T) {
	client(t)
	b, err := errand.OpenBackend(context.Background(), "memcache://"+os.Getenv("ERRAND_MEMCACHE_ADDRS")+"?prefix=errand-url&result_expiry=1m")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if e := b.(driver.Expirer).ResultExpiry(); e != time.Minute {
		t.Fatalf("result_expiry=1m gave %v", e)
	}
}

// TestServerRestartDuringChord: memcached restarts while a chord is in
// flight. Everything it held is gone; the user sees an error, never a hang.
func TestServerRestartDuringChord(t *testing.T) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		conformance.ServiceUnavailable(t, "memcached not installed (scripts/services start installs it)")
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-l", "127.0.0.1", "-p", strconv.Itoa(port), "-m", "16", "-u", "root")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	server := start()
	defer func() { server.Process.Kill(); server.Wait() }()
	mc := gomemcache.New("127.0.0.1:" + strconv.Itoa(port))
	waitPing(t, mc)

	be := memcachebackend.New(mc, nil)
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: be})
	release := make(chan struct{})
	var ran atomic.Int32
	srv.Register("member", func(i int) (int, error) { <-release; return i, nil })
	srv.Register("callback", func(xs ...int) error { ran.Add(1); return nil })
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, ErrorBackoff: 50 * time.Millisecond})
	w.Start()
	defer w.Shutdown(context.Background())
	var sigs []*errand.Signature
	for i := range 8 {
		sigs = append(sigs, errand.NewSignature("member", i))
	}
	g, _ := errand.NewGroup(sigs...)
	c, _ := errand.NewChord(g, errand.NewSignature("callback"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := srv.SendChord(ctx, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	server.Process.Kill()
	server.Wait()
	server = start()
	waitPing(t, mc)
	close(release)
	_, err = r.Get(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("chord Get after memcached lost its data = %v; want an error reporting the chord's fate, not success or a hang", err)
	}
	if ran.Load() != 0 {
		t.Fatal("the chord callback ran although its group was lost")
	}
	t.Logf("the user sees: %v", err)
}

func waitPing(t *testing.T, mc *gomemcache.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for mc.Ping() != nil {
		if time.Now().After(deadline) {
			t.Fatal("memcached did not come up")
		}
		<-tick.C
	}
}

package memcachebackend_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"strings"
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
	st := &errand.TaskState{TaskUUID: rand.Text(), State: errand.StateSuccess,
		Results: []errand.Result{{Type: "string", Value: []byte(`"` + strings.Repeat("x", 2<<20) + `"`)}}}
	err := errors.Join(b.SetStates(context.Background(), []*errand.TaskState{st})...)
	if err == nil || !strings.Contains(err.Error(), "item size limit") {
		t.Fatalf("SetStates of a 2 MiB state = %v, want a clear size error", err)
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

// TestServerRestart runs the kit's restart scenario on a private
// memcached: everything it held is gone after the restart, and the backend
// declares Lossy, so every waiter must get its result or an error, never
// hang or see a wrong value.
func TestServerRestart(t *testing.T) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		conformance.ServiceUnavailable(t, "memcached not installed (scripts/services start installs it)")
	}
	addr := conformance.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	mc := gomemcache.New(addr)
	t.Cleanup(func() { mc.Close() })
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "-l", host, "-p", port, "-m", "16", "-u", "root")
	}, func(context.Context) error { return mc.Ping() })
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   conformance.MemoryBroker(memorybroker.Options{}),
		Backend:  harness(mc),
		Restarts: conformance.RestartsBackend,
		Stop:     server.Kill,
		Start:    server.Start,
	})
}

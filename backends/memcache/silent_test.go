package memcachebackend_test

import (
	"os"
	"strings"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/errand-go/errand"
	memcachebackend "github.com/errand-go/errand/backends/memcache"
	"github.com/errand-go/errand/conformance"
)

// TestSilentServer: with memcached accepting connections but never
// answering (a stalled proxy), every backend call and OpenBackend return an
// error well within the caller's ctx deadline: gomemcache has no ctx, and
// its socket Timeout (500ms by default) bounds each round trip instead.
func TestSilentServer(t *testing.T) {
	client(t) // skips or fails when memcached is unreachable
	target := strings.Split(os.Getenv("ERRAND_MEMCACHE_ADDRS"), ",")[0]
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: target,
		Backend: func(t testing.TB, addr string) errand.Backend {
			mc := gomemcache.New(addr)
			mc.Timeout = silentCallTimeout
			b := memcachebackend.New(mc, &memcachebackend.Options{Prefix: "errand-test", CloseClient: true})
			t.Cleanup(func() { b.Close() })
			return b
		},
		BackendURL:  func(addr string) string { return "memcache://" + addr + "?prefix=errand-test&timeout=300ms" },
		CallTimeout: silentCallTimeout,
	})
}

// silentCallTimeout is the per-call socket timeout in this test: the
// client's Timeout, and timeout= in the URL.
const silentCallTimeout = 300 * time.Millisecond

// Package redistest is the test scaffolding errand's Redis modules share
// (the broker, the backend, redisconn itself): the servers of the
// environment and private ones, a slow link, the check of script
// prologues, the Sentinel redaction cases. It is a package of the
// redisconn module, which both Redis modules require, and is imported by
// tests only.
//
// A test that needs a server it cannot reach skips, or fails when
// ERRAND_REQUIRE_SERVICES=1 (conformance.ServiceUnavailable).
package redistest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/conformance"
)

// Servers returns clients of the Redis deployments named by the
// environment: "Single" (ERRAND_REDIS_URL) and "Cluster"
// (ERRAND_REDIS_CLUSTER_ADDRS), closed when t ends. Both must be set and
// answer.
func Servers(t testing.TB) map[string]goredis.UniversalClient {
	t.Helper()
	out := map[string]goredis.UniversalClient{}
	if u := os.Getenv("ERRAND_REDIS_URL"); u != "" {
		o, err := goredis.ParseURL(u)
		if err != nil {
			t.Fatalf("ERRAND_REDIS_URL: %v", err)
		}
		out["Single"] = goredis.NewClient(o)
	}
	if a := os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS"); a != "" {
		out["Cluster"] = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(a, ",")})
	}
	for name, c := range out {
		t.Cleanup(func() { c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err != nil {
			conformance.ServiceUnavailable(t, name+" Redis unreachable: "+err.Error())
		}
	}
	if len(out) < 2 {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL and ERRAND_REDIS_CLUSTER_ADDRS must both be set (scripts/services start exports them)")
	}
	return out
}

// URLOptions returns ERRAND_REDIS_URL parsed: the shared single node.
func URLOptions(t testing.TB) *goredis.Options {
	t.Helper()
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL is not set (scripts/services start exports it)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	return o
}

// PrivateServer starts a redis-server of t's own on a free port of
// 127.0.0.1, in a directory of t's own, without persistence unless args
// (added to the command line, where a later option overrides an earlier
// one) say otherwise, and returns its address and the process, which t's
// end kills; the process starts again in the same directory. A test that
// must flush, stall, restart or reconfigure a server uses one: the
// shared servers serve every module's tests at once.
func PrivateServer(t testing.TB, args ...string) (string, *conformance.ServerProcess) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		conformance.ServiceUnavailable(t, "redis-server not installed (scripts/services start installs it)")
	}
	addr, dir := conformance.FreeAddr(t), t.TempDir()
	host, port, _ := strings.Cut(addr, ":")
	ping := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { ping.Close() })
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, append([]string{"--port", port, "--bind", host, "--dir", dir, "--save", "", "--appendonly", "no"}, args...)...)
	}, func(ctx context.Context) error { return ping.Ping(ctx).Err() })
	return addr, server
}

// SilentCallTimeout is the drivers' per-call timeout in the silent-server
// tests (Options.CallTimeout, timeout= in URLs): it bounds a call without
// a ctx deadline on a silent server, whatever go-redis's own timeouts and
// retries (with its defaults a pipelined Publish took 35s before
// CallTimeout).
const SilentCallTimeout = 2 * time.Second

// SentinelRedactionURLs are redis-sentinel:// URLs that fail to open
// (port 1 refuses, so no sentinel answers; timeout= bounds the open's
// check, as go-redis retries an unreachable sentinel set until then),
// each with the secrets it holds: the master's and the sentinels'
// credentials, which must stay out of open errors and of
// errand.RedactURL (conformance.RunOpenRedaction). param is a query
// parameter of the driver's own (name=value) that one URL carries too.
func SentinelRedactionURLs(param string) map[string][]string {
	return map[string][]string{
		"redis-sentinel://alice:hunter2@127.0.0.1:1,127.0.0.1:2/0?master=m&timeout=500ms":                {"hunter2"},
		"redis-sentinel://hunter2@127.0.0.1:1/0?master=m&timeout=500ms":                                  {"hunter2"},
		"redis-sentinel://127.0.0.1:1/0?master=m&timeout=500ms&sentinel_password=s3cret":                 {"s3cret"},
		"redis-sentinel://:hunter2@127.0.0.1:1/0?master=m&timeout=500ms&sentinel_password=p%40ss%2Fword": {"hunter2", "p@ss/word", "p%40ss%2Fword"},
		"rediss-sentinel://alice:p%40ss%2Fhunter2@127.0.0.1:1/0?master=m&timeout=500ms":                  {"p@ss/hunter2", "p%40ss%2Fhunter2"},
		"redis-sentinel://alice:hunter2@127.0.0.1:1/0?timeout=500ms":                                     {"hunter2"},
		"redis-sentinel://alice:hunter2@127.0.0.1:1/0?master=m&timeout=500ms&sentinel_username=w":        {"hunter2"},
		"redis-sentinel://alice:hunter2@127.0.0.1:1/0?master=m&timeout=500ms&" + param:                   {"hunter2"},
	}
}

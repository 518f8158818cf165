package redisbackend_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// servers returns the single node and the cluster named by the environment;
// missing or unreachable servers skip, or fail when ERRAND_REQUIRE_SERVICES=1.
func servers(t *testing.T) map[string]goredis.UniversalClient {
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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err != nil {
			conformance.ServiceUnavailable(t, name+" Redis unreachable: "+err.Error())
		}
		t.Cleanup(func() { c.Close() })
	}
	if len(out) < 2 {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL and ERRAND_REDIS_CLUSTER_ADDRS must both be set (scripts/services start exports them)")
	}
	return out
}

func harness(rdb goredis.UniversalClient) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test", ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		// Durable as far as the server persists (an append-only file, as
		// TestServerRestart runs it).
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Start: true, PendingIfAbsent: true, Located: true},
	}
}

func TestConformance(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conformance.RunBackend(t, harness(rdb))
			conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), harness(rdb))
		})
	}
}

func TestOpenByURL(t *testing.T) {
	servers(t)
	ctx := context.Background()
	b, err := errand.OpenBackend(ctx, os.Getenv("ERRAND_REDIS_URL")+"?prefix=errand-url&result_expiry=1m")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if e := b.(driver.Expirer).ResultExpiry(); e != time.Minute {
		t.Fatalf("result_expiry=1m gave %v", e)
	}
	id := rand.Text()
	if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{{TaskUUID: id, State: errand.StatePending}})...); err != nil {
		t.Fatal(err)
	}
	if st, err := b.GetState(ctx, id); err != nil || st.State != errand.StatePending {
		t.Fatalf("GetState = %+v, %v", st, err)
	}
	if _, err := errand.OpenBackend(ctx, "redis://:hunter2@127.0.0.1:1/0"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("opening an unreachable server: %v (want an error without the password)", err)
	}
}

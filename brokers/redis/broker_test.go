package redisbroker_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

// servers returns the Redis deployments named by the environment: the
// single node (ERRAND_REDIS_URL) and the cluster (ERRAND_REDIS_CLUSTER_ADDRS).
// A missing or unreachable server skips, or fails when
// ERRAND_REQUIRE_SERVICES=1.
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

func harness(rdb goredis.UniversalClient) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test"})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{MaxPayload: redisbroker.DefaultMaxPayload, OrderedByETA: true, Priority: true, DetectsLostLease: true, Durable: true, Purge: true, Stats: true,
			Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true, Schedules: true,
			Unique: true, RateLimit: true, Colocate: true},
		Timing: conformance.Timing{Lease: 300 * time.Millisecond, Delay: 300 * time.Millisecond, DelayBound: 100 * time.Millisecond},
		// Foreign bytes go where another program would put them: LPUSH
		// onto the queue's pending list (keys: scripts.go).
		PushRaw: func(t testing.TB, _ errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			if err := rdb.LPush(context.Background(), "{errand-test:"+queue+"}:pending", raw).Err(); err != nil {
				t.Fatalf("PushRaw: LPUSH onto the pending list: %v", err)
			}
			return true
		},
	}
}

func TestConformance(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conformance.RunBroker(t, harness(rdb))
			conformance.RunWorker(t, harness(rdb), conformance.MemoryBackend())
		})
	}
}

func BenchmarkBroker(b *testing.B) {
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		b.Skip("ERRAND_REDIS_URL not set")
	}
	o, _ := goredis.ParseURL(u)
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	conformance.BenchmarkBroker(b, harness(rdb))
}

func TestOpenByURL(t *testing.T) {
	servers(t)
	ctx := context.Background()
	u := os.Getenv("ERRAND_REDIS_URL") + "?prefix=errand-url"
	b, err := errand.OpenBroker(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addrs := strings.Split(os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS"), ",")
	cu := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	cb, err := errand.OpenBroker(ctx, cu)
	if err != nil {
		t.Fatalf("open cluster by URL: %v", err)
	}
	defer cb.Close()
	q := "url-" + rand.Text()
	for _, br := range []errand.Broker{b, cb} {
		if err := br.Publish(ctx, errand.Message{ID: "m", Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		ds, err := br.Fetch(ctx, q, 1, time.Second)
		if err != nil || len(ds) != 1 || ds[0].ID != "m" {
			t.Fatalf("fetch through a URL-opened broker: %v, %v", ds, err)
		}
		ackOne(ctx, br, ds[0])
	}
	_, err = errand.OpenBroker(ctx, "redis://:hunter2@127.0.0.1:1/0")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("opening an unreachable server: %v (want an error without the password)", err)
	}
}

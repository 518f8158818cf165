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
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// servers returns the single node and the cluster named by the
// environment (redistest.Servers).
func servers(t *testing.T) map[string]goredis.UniversalClient { return redistest.Servers(t) }

func harness(rdb goredis.UniversalClient) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test"})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{MaxPayload: redisbroker.DefaultMaxPayload, OrderedByETA: true, Priority: true, DetectsLostLease: true, Durable: true, Purge: true, Stats: true,
			Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true, Schedules: true,
			Unique: true, RateLimit: true, Colocate: true, CancelNotify: true},
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

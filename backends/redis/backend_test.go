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
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// servers returns the single node and the cluster named by the
// environment (redistest.Servers).
func servers(t *testing.T) map[string]goredis.UniversalClient { return redistest.Servers(t) }

func harness(rdb goredis.UniversalClient) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test", ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		// Durable as far as the server persists (an append-only file, as
		// TestServerRestart runs it).
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Start: true, PendingIfAbsent: true, Located: true, Cancel: true},
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

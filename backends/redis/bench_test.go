package redisbackend_test

import (
	"context"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
)

// BenchmarkWorker drains no-op tasks from the memory broker with the Redis
// backend (single server) and reports the backend's calls per task.
func BenchmarkWorker(b *testing.B) {
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(b, "ERRAND_REDIS_URL is not set (scripts/services start exports it)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		b.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(b, "Redis unreachable: "+err.Error())
	}
	conformance.BenchmarkWorker(b, conformance.MemoryBroker(memorybroker.Options{}), harness(rdb))
}

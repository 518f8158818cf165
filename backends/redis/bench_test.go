package redisbackend_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// BenchmarkWorker drains no-op tasks from the memory broker with the Redis
// backend (single server) and reports the backend's calls per task.
func BenchmarkWorker(b *testing.B) {
	o := redistest.URLOptions(b)
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(b, "Redis unreachable: "+err.Error())
	}
	conformance.BenchmarkWorker(b, conformance.MemoryBroker(memorybroker.Options{}), harness(rdb))
}

package redisbroker_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// BenchmarkWorker drains no-op tasks from the Redis broker (single server)
// into the memory backend and reports the broker's calls per task.
func BenchmarkWorker(b *testing.B) {
	o := redistest.URLOptions(b)
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(b, "Redis unreachable: "+err.Error())
	}
	conformance.BenchmarkWorker(b, harness(rdb), conformance.MemoryBackend())
}

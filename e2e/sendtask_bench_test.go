package e2e_test

// BenchmarkSendTask measures one producer's SendTask on the Redis broker
// and the Redis backend on one Redis (the carried publish: PENDING and the
// message in one round trip): ns, allocations and bytes per send, for
// pprof (-cpuprofile, -memprofile). Each run empties its queue every
// 10 000 sends so that Redis's memory stays flat.
//
//	ERRAND_HOTPATH_REDIS_URL=redis://127.0.0.1:16999/0 go test -run '^$' -bench SendTask -benchmem .

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
)

func BenchmarkSendTask(b *testing.B) {
	u := os.Getenv("ERRAND_HOTPATH_REDIS_URL")
	if u == "" {
		b.Skip("ERRAND_HOTPATH_REDIS_URL not set (a Redis of the benchmark's own)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		b.Fatal(err)
	}
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	ctx := context.Background()
	srv := hotServer(b, rdb)
	defer srv.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%10000 == 0 {
			b.StopTimer()
			if err := rdb.FlushDB(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, err := srv.SendTask(ctx, errand.NewSignature("noop", int64(i), int64(1), int64(2), int64(3), int64(4))); err != nil {
			b.Fatal(err)
		}
	}
}

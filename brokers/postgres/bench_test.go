package postgresbroker_test

import (
	"context"
	"testing"

	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

func BenchmarkBroker(b *testing.B) {
	pool := pgdbtest.Pool(b)
	conformance.BenchmarkBroker(b, harness(b, pool))
}

func BenchmarkWorker(b *testing.B) {
	pool := pgdbtest.Pool(b)
	conformance.BenchmarkWorker(b, harness(b, pool), conformance.MemoryBackend())
}

// BenchmarkPublishOne: one message a call, as SendTask does.
func BenchmarkPublishOne(b *testing.B) {
	pool := pgdbtest.Pool(b)
	h := harness(b, pool)
	br := h.New(b)
	ctx := context.Background()
	body := []byte(`{"UUID":"bench","Name":"noop","Args":[]}`)
	b.ReportAllocs()
	b.SetParallelism(8) // 16 producers on 2 CPUs: commits contend
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Publish(ctx, driver.Message{ID: "x", Queue: "bench-one", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package conformance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// BenchmarkBroker measures a broker's throughput: b.N messages published in
// batches of 100, then drained by 4 consumers fetching up to 10 at a time
// and acking each. It reports msgs/s and checks every message was delivered
// exactly once.
func BenchmarkBroker(b *testing.B, h BrokerHarness) {
	br := h.New(b)
	q := name(b, "bench")
	ctx := context.Background()
	body := []byte(`{"UUID":"bench","Name":"noop","Args":[]}`)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for lo := 0; lo < b.N; lo += 100 {
		var msgs []errand.Message
		for i := lo; i < min(lo+100, b.N); i++ {
			msgs = append(msgs, errand.Message{ID: fmt.Sprint(i), Queue: q, Body: body})
		}
		if err := br.Publish(ctx, msgs...); err != nil {
			b.Fatalf("Publish: %v", err)
		}
	}
	var done atomic.Int64
	var seen sync.Map
	var dup atomic.Int64
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for dctx.Err() == nil {
				ds, err := br.Fetch(dctx, q, 10, time.Minute)
				if err != nil {
					return
				}
				for _, d := range ds {
					if _, loaded := seen.LoadOrStore(d.ID, true); loaded {
						dup.Add(1)
					}
					if err := br.Ack(ctx, d); err != nil {
						b.Errorf("Ack: %v", err)
					}
					if done.Add(1) == int64(b.N) {
						cancel()
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := done.Load(); n != int64(b.N) || dup.Load() != 0 {
		b.Fatalf("delivered %d of %d messages, %d duplicates", n, b.N, dup.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

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
					if err := ackOne(ctx, br, d); err != nil {
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

// BenchmarkWorker measures what errand costs a pair of drivers per task:
// b.N no-op tasks sent as one group (SendGroup, 4 batches in flight), then
// drained by a Worker of 10 slots on a Server over the two drivers, each
// wrapped to count the calls errand makes to it (see countBroker and
// countBackend: the wrappers keep the optional interfaces that shape the
// per-task path, such as driver.Limiter, driver.Starter and
// driver.PendingWriter). It reports:
//
//   - tasks/s: the drain, from the worker's start to the last success;
//   - broker-calls/task, backend-calls/task: driver calls made from the
//     worker's start until it has shut down (fetches, acks, lease renewals;
//     state reads and writes), per task;
//   - send-broker-calls/task, send-backend-calls/task: the same for the
//     group send (publishes; PENDING states).
//
// A call is one method call on the driver: on a network driver, usually
// one round trip (a batch call counts once). It fails unless every task ran
// exactly once and succeeded.
func BenchmarkWorker(b *testing.B, bh BrokerHarness, beh BackendHarness) {
	b.StopTimer()
	var brokerCalls, backendCalls atomic.Int64
	br := countBroker(bh.New(b), &brokerCalls)
	be := countBackend(beh.New(b, 0), &backendCalls)
	q := name(b, "bench-worker")
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be, DefaultQueue: q})
	if err != nil {
		b.Fatalf("NewServer: %v", err)
	}
	n := b.N
	runs := make([]atomic.Int32, n)
	if err := srv.Register("noop", func(i int) error { runs[i].Add(1); return nil }); err != nil {
		b.Fatalf("Register: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sigs := make([]*errand.Signature, n)
	for i := range sigs {
		sigs[i] = errand.NewSignature("noop", i)
	}
	g, err := errand.NewGroup(sigs...)
	if err != nil {
		b.Fatalf("NewGroup: %v", err)
	}
	if _, err := srv.SendGroup(ctx, g, errand.SendConcurrency(4)); err != nil {
		b.Fatalf("SendGroup of %d tasks: %v", n, err)
	}
	sendBroker, sendBackend := brokerCalls.Swap(0), backendCalls.Swap(0)

	var succeeded atomic.Int64
	all := make(chan struct{})
	count := func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
			st, err := next(ctx, sig)
			if st != nil && st.State == errand.StateSuccess && succeeded.Add(1) == int64(n) {
				close(all)
			}
			return st, err
		}
	}
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10, Middleware: []errand.Middleware{count}})
	b.StartTimer()
	start := time.Now()
	wk.Start()
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("worker benchmark: %d of %d tasks succeeded before the deadline (at-least-once promise: every task runs)", succeeded.Load(), n)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := wk.Shutdown(ctx); err != nil {
		b.Errorf("worker shutdown: %v", err)
	}
	var never, twice int
	for i := range runs {
		switch r := runs[i].Load(); {
		case r == 0:
			never++
		case r > 1:
			twice++
		}
	}
	if never > 0 || twice > 0 {
		b.Fatalf("worker benchmark: of %d tasks, %d never ran and %d ran more than once (a drain without failures must run each task exactly once)", n, never, twice)
	}
	per := func(c int64) float64 { return float64(c) / float64(n) }
	b.ReportMetric(float64(n)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(per(brokerCalls.Load()), "broker-calls/task")
	b.ReportMetric(per(backendCalls.Load()), "backend-calls/task")
	b.ReportMetric(per(sendBroker), "send-broker-calls/task")
	b.ReportMetric(per(sendBackend), "send-backend-calls/task")
}

package errandotel_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	errandotel "github.com/errand-go/errand/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// rig is a server and a worker over the memory drivers, instrumented into
// an in-memory span recorder and a manual metric reader.
type rig struct {
	srv    *errand.Server
	w      *errand.Worker
	broker *memorybroker.Broker
	inst   *errandotel.Instrumentation
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

// newRig builds a rig; register registers the tasks before the worker
// starts. Fixed 1ms retries.
func newRig(t *testing.T, register func(srv *errand.Server)) *rig {
	t.Helper()
	return newRigWith(t, errandotel.Config{}, nil, register)
}

// newRigWith builds a rig with cfg (its providers replaced by the rig's)
// and inner as send middleware inside the instrumentation's.
func newRigWith(t *testing.T, cfg errandotel.Config, inner []errand.SendMiddleware, register func(srv *errand.Server)) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		r.tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	var err error
	cfg.TracerProvider, cfg.MeterProvider = r.tp, mp
	r.inst, err = errandotel.New(cfg)
	if err != nil {
		t.Fatalf("errandotel.New: %v", err)
	}
	r.broker = memorybroker.New(nil)
	r.srv, err = errand.NewServer(errand.Config{
		Broker:         r.broker,
		Backend:        memorybackend.New(nil),
		SendMiddleware: append([]errand.SendMiddleware{r.inst.SendMiddleware()}, inner...),
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	register(r.srv)
	r.w = r.srv.NewWorker(errand.WorkerConfig{
		Concurrency: 4,
		RetryPolicy: errand.Fixed(time.Millisecond),
		Middleware:  []errand.Middleware{r.inst.Middleware()},
	})
	r.w.Start()
	t.Cleanup(func() { r.w.Shutdown(context.Background()) })
	return r
}

// stop shuts the worker down: every attempt has then returned through the
// middleware, so its span has ended and its metrics are recorded.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.w.Shutdown(ctx); err != nil {
		t.Fatalf("worker Shutdown: %v", err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// spansNamed returns the ended spans called name, in the order they ended.
func (r *rig) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// collect reads every metric of the rig.
func collect(t *testing.T, reader *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

func findMetric(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// sumOf returns the value of the int64 sum name at the point whose
// attributes include every one of want, and whether there is one.
func sumOf(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (int64, bool) {
	m, ok := findMetric(rm, name)
	if !ok {
		return 0, false
	}
	var points []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	}
	for _, p := range points {
		if hasAll(p.Attributes, want) {
			return p.Value, true
		}
	}
	return 0, false
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func isChildOf(child sdktrace.ReadOnlySpan, parent trace.SpanContext) bool {
	return child.Parent().TraceID() == parent.TraceID() && child.Parent().SpanID() == parent.SpanID() &&
		child.SpanContext().TraceID() == parent.TraceID()
}

type sdktraceSpan = sdktrace.ReadOnlySpan

// lockedOutput collects output written from several goroutines.
type lockedOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *lockedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *lockedOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

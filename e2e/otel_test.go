package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	errandotel "github.com/errand-go/errand/otel"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The otel module's two-process test lives here, in the test-only module,
// so that otel's go.mod requires no Redis driver: a user of errandotel
// does not download go-redis.

// otelWorkerEnv turns the test binary into the worker process of
// TestOtelTwoProcessesRedis; its value is the JSON of a otelWorkerSpec.
const otelWorkerEnv = "ERRAND_E2E_OTEL_WORKER_PROCESS"

type otelWorkerSpec struct {
	Prefix string // key prefix of broker and backend
	Queue  string
	Out    string // where the worker writes its otelWorkerReport
	Ends   int    // attempts recorded SUCCESS or FAILURE before it stops
}

// otelWorkerReport is what the worker process saw, written as JSON.
type otelWorkerReport struct {
	Spans    []otelSpanRecord
	Counters map[string]int64 // "<metric> <task>" → value
}

type otelSpanRecord struct {
	Name, Kind              string
	TraceID, SpanID, Parent string
	Attempt                 int64
	State                   string
}

func otelRedisClient(t *testing.T) *goredis.Client {
	t.Helper()
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL is not set (scripts/services start, then . .services/env)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	rdb := goredis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(t, "Redis at ERRAND_REDIS_URL unreachable: "+err.Error())
	}
	return rdb
}

func otelRedisServer(t *testing.T, rdb *goredis.Client, spec otelWorkerSpec, mw errand.SendMiddleware) *errand.Server {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{
		Broker:         redisbroker.New(rdb, &redisbroker.Options{Prefix: spec.Prefix}),
		Backend:        redisbackend.New(rdb, &redisbackend.Options{Prefix: spec.Prefix}),
		DefaultQueue:   spec.Queue,
		SendMiddleware: []errand.SendMiddleware{mw},
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	srv.Register("ok", func(n int) (int, error) { return n, nil })
	srv.Register("bad", func() error { return errors.New("bad on purpose") })
	return srv
}

// The "done when": a task sent inside a span by one process runs in
// another process, on Redis, as the child of the producer span in the
// sender's trace, and the worker process's counters match what it ran.
func TestOtelTwoProcessesRedis(t *testing.T) {
	t.Parallel()
	rdb := otelRedisClient(t)
	if env := os.Getenv(otelWorkerEnv); env != "" {
		var spec otelWorkerSpec
		if err := json.Unmarshal([]byte(env), &spec); err != nil {
			t.Fatalf("%s: %v", otelWorkerEnv, err)
		}
		runOtelWorkerProcess(t, rdb, spec)
		return
	}

	spec := otelWorkerSpec{Prefix: "e2e-otel-" + rand.Text()[:8], Queue: "tasks", Out: filepath.Join(t.TempDir(), "report.json"), Ends: 4}
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), "*"+spec.Prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The worker: this test binary again, running only this test.
	envSpec, _ := json.Marshal(spec)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOtelTwoProcessesRedis$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), otelWorkerEnv+"="+string(envSpec))
	var out lockedOutput
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the worker process: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// The producer: this process, tracing into memory.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	inst, err := errandotel.New(errandotel.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	srv := otelRedisServer(t, rdb, spec, inst.SendMiddleware())
	pctx, parent := tp.Tracer("test").Start(ctx, "caller")
	var results []*errand.AsyncResult
	for i := range 3 {
		sig := errand.NewSignature("ok", i)
		res, err := srv.SendTask(pctx, sig)
		if err != nil {
			t.Fatalf("SendTask: %v", err)
		}
		results = append(results, res)
	}
	bad := errand.NewSignature("bad")
	bad.RetryCount = 1
	res, err := srv.SendTask(pctx, bad)
	if err != nil {
		t.Fatalf("SendTask: %v", err)
	}
	results = append(results, res)
	parent.End()
	for _, r := range results {
		if _, err := r.Wait(ctx); err != nil {
			t.Fatalf("waiting for %s (%s) run by the worker process: %v; its output:\n%s", r.Signature.Name, r.Signature.UUID, err, out.String())
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the worker process failed: %v; its output:\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatalf("the worker process did not end; its output:\n%s", out.String())
	}
	b, err := os.ReadFile(spec.Out)
	if err != nil {
		t.Fatalf("the worker process wrote no report: %v; its output:\n%s", err, out.String())
	}
	var rep otelWorkerReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}

	producers := map[string]sdktrace.ReadOnlySpan{} // by span ID
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			producers[s.SpanContext().SpanID().String()] = s
		}
	}
	consumers := 0
	for _, s := range rep.Spans {
		if s.Kind != trace.SpanKindConsumer.String() {
			continue
		}
		consumers++
		if s.TraceID != parent.SpanContext().TraceID().String() {
			t.Errorf("worker span %s (attempt %d) is in trace %s, not the sender's %s", s.Name, s.Attempt, s.TraceID, parent.SpanContext().TraceID())
		}
		if s.Attempt == 2 {
			continue // its parent is the retry's send, a producer span of the worker process
		}
		p, ok := producers[s.Parent]
		if !ok {
			t.Errorf("worker span %s (attempt %d) has parent %s, which is no producer span of the sending process", s.Name, s.Attempt, s.Parent)
			continue
		}
		if p.Name() != "send "+s.Name[len("process "):] || p.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("worker span %s's parent is %q, child of %s; want the send of the same task, child of the caller's span", s.Name, p.Name(), p.Parent().SpanID())
		}
	}
	if consumers != 5 {
		t.Errorf("the worker process must record one consumer span per attempt: 3 ok + 2 bad = 5, got %d: %+v", consumers, rep.Spans)
	}
	for key, want := range map[string]int64{
		errandotel.MetricTasksStarted + " ok":    3,
		errandotel.MetricTasksSucceeded + " ok":  3,
		errandotel.MetricTasksStarted + " bad":   2,
		errandotel.MetricTasksRetried + " bad":   1,
		errandotel.MetricTasksFailed + " bad":    1,
		errandotel.MetricTasksSent + " bad":      1, // the retry, sent by the worker
		errandotel.MetricTasksInFlight + " ok":   0,
		errandotel.MetricTasksFailed + " ok":     0,
		errandotel.MetricTasksSucceeded + " bad": 0,
		errandotel.MetricTasksRetried + " ok":    0,
		errandotel.MetricTasksInFlight + " bad":  0,
		errandotel.MetricTasksSent + " ok":       0,
		errandotel.MetricTaskDuration + " ok":    3, // samples
		errandotel.MetricTaskDuration + " bad":   2,
	} {
		if got := rep.Counters[key]; got != want {
			t.Errorf("worker process counter %s = %d, want %d (it ran 3 ok and bad twice)", key, got, want)
		}
	}
}

// runWorkerProcess is the worker side of TestOtelTwoProcessesRedis: it runs
// tasks until spec.Ends attempts have ended for good, then writes what it
// traced and counted to spec.Out.
func runOtelWorkerProcess(t *testing.T, rdb *goredis.Client, spec otelWorkerSpec) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	inst, err := errandotel.New(errandotel.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	srv := otelRedisServer(t, rdb, spec, inst.SendMiddleware())
	ended := make(chan struct{}, spec.Ends)
	count := func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
			st, err := next(ctx, sig)
			if st != nil && st.State.Terminal() {
				ended <- struct{}{}
			}
			return st, err
		}
	}
	w := srv.NewWorker(errand.WorkerConfig{
		Concurrency: 2,
		RetryPolicy: errand.Fixed(time.Millisecond),
		Middleware:  []errand.Middleware{inst.Middleware(), count},
	})
	w.Start()
	deadline := time.After(45 * time.Second)
	for range spec.Ends {
		select {
		case <-ended:
		case <-deadline:
			t.Fatalf("worker process: fewer than %d attempts ended within 45s", spec.Ends)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("worker Shutdown: %v", err)
	}
	var rep otelWorkerReport
	for _, s := range exp.GetSpans() {
		rep.Spans = append(rep.Spans, otelSpanRecord{
			Name: s.Name, Kind: s.SpanKind.String(),
			TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(), Parent: s.Parent.SpanID().String(),
			Attempt: attrOf(s.Attributes, errandotel.AttemptKey).AsInt64(), State: attrOf(s.Attributes, errandotel.TaskStateKey).AsString(),
		})
	}
	rm := collect(t, reader)
	rep.Counters = map[string]int64{}
	for _, name := range []string{errandotel.MetricTasksSent, errandotel.MetricTasksStarted, errandotel.MetricTasksSucceeded,
		errandotel.MetricTasksRetried, errandotel.MetricTasksFailed, errandotel.MetricTasksInFlight} {
		for _, task := range []string{"ok", "bad"} {
			v, _ := sumOf(rm, name, attribute.String("errand.task.name", task), attribute.String("messaging.destination.name", spec.Queue))
			rep.Counters[name+" "+task] = v
		}
	}
	for task, n := range histogramCounts(rm, errandotel.MetricTaskDuration) {
		rep.Counters[errandotel.MetricTaskDuration+" "+task] = int64(n)
	}
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(spec.Out, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("worker process: %d spans, counters %v\n", len(rep.Spans), rep.Counters)
}

// collect reads every metric of reader.
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

func attrOf(kvs []attribute.KeyValue, key attribute.Key) attribute.Value {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// histogramCounts returns the sample count of histogram name by task.
func histogramCounts(rm metricdata.ResourceMetrics, name string) map[string]uint64 {
	counts := map[string]uint64{}
	m, ok := findMetric(rm, name)
	if !ok {
		return counts
	}
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		v, _ := p.Attributes.Value("errand.task.name")
		counts[v.AsString()] += p.Count
	}
	return counts
}

// lockedOutput collects a child process's output.
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

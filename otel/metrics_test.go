package errandotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	errandotel "github.com/errand-go/errand/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The counters match the attempts run: 5 successes, and 2 tasks that fail
// their first attempt, are retried once and fail again.
func TestMetricsCountAttempts(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(srv *errand.Server) {
		srv.Register("ok", func() error { return nil })
		srv.Register("bad", func() error { return errors.New("no") })
	})
	ctx := testCtx(t)
	var results []*errand.AsyncResult
	for range 5 {
		res, err := r.srv.SendTask(ctx, errand.NewSignature("ok"))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	for range 2 {
		sig := errand.NewSignature("bad")
		sig.RetryCount = 1
		res, err := r.srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	for _, res := range results {
		if _, err := res.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	r.stop(t)
	rm := collect(t, r.reader)
	q := attribute.String("messaging.destination.name", errand.DefaultQueue)
	for _, tc := range []struct {
		metric, task string
		want         int64
		why          string
	}{
		{errandotel.MetricTasksSent, "ok", 5, "5 sends"},
		{errandotel.MetricTasksSent, "bad", 4, "2 sends and 2 retries"},
		{errandotel.MetricTasksStarted, "ok", 5, "one attempt each"},
		{errandotel.MetricTasksStarted, "bad", 4, "two attempts each"},
		{errandotel.MetricTasksSucceeded, "ok", 5, "every attempt succeeded"},
		{errandotel.MetricTasksRetried, "bad", 2, "each first attempt scheduled a retry"},
		{errandotel.MetricTasksFailed, "bad", 2, "each second attempt failed for good"},
		{errandotel.MetricTasksInFlight, "ok", 0, "nothing runs once the worker is shut down"},
		{errandotel.MetricTasksInFlight, "bad", 0, "nothing runs once the worker is shut down"},
	} {
		got, ok := sumOf(rm, tc.metric, attribute.String("errand.task.name", tc.task), q)
		if !ok || got != tc.want {
			t.Errorf("%s{task=%s, queue=%s} = %d (present: %v), want %d: %s", tc.metric, tc.task, errand.DefaultQueue, got, ok, tc.want, tc.why)
		}
	}
	for _, tc := range []struct{ metric, task string }{
		{errandotel.MetricTasksFailed, "ok"}, {errandotel.MetricTasksRetried, "ok"}, {errandotel.MetricTasksSucceeded, "bad"},
	} {
		if got, ok := sumOf(rm, tc.metric, attribute.String("errand.task.name", tc.task)); ok && got != 0 {
			t.Errorf("%s{task=%s} = %d, want none", tc.metric, tc.task, got)
		}
	}
	m, ok := findMetric(rm, errandotel.MetricTaskDuration)
	if !ok {
		t.Fatalf("no %s histogram", errandotel.MetricTaskDuration)
	}
	if m.Unit != "s" {
		t.Errorf("%s unit %q, want s", m.Name, m.Unit)
	}
	counts := map[string]uint64{}
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		v, _ := p.Attributes.Value("errand.task.name")
		counts[v.AsString()] += p.Count
	}
	if counts["ok"] != 5 || counts["bad"] != 4 {
		t.Errorf("the run-time histogram must hold one sample per attempt: ok 5, bad 4; got %v", counts)
	}
}

// The queue-depth gauge reports the driver's Stats of each observed queue.
func TestMetricsQueueDepth(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(*errand.Server) {})
	ctx := testCtx(t)
	if _, err := r.inst.ObserveQueues(r.broker, "idle", "other"); err != nil {
		t.Fatalf("ObserveQueues: %v", err)
	}
	for range 3 {
		sig := errand.NewSignature("nobody")
		sig.RoutingKey = "idle"
		if _, err := r.srv.SendTask(ctx, sig); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	sig := errand.NewSignature("nobody")
	sig.RoutingKey, sig.ETA = "idle", &later
	if _, err := r.srv.SendTask(ctx, sig); err != nil {
		t.Fatal(err)
	}
	rm := collect(t, r.reader)
	for _, tc := range []struct {
		queue, state string
		want         int64
	}{
		{"idle", "pending", 3}, {"idle", "delayed", 1}, {"idle", "in_flight", 0}, {"idle", "dead", 0},
		{"other", "pending", 0},
	} {
		got, ok := sumOf(rm, errandotel.MetricQueueDepth, attribute.String("messaging.destination.name", tc.queue), attribute.String("state", tc.state))
		if !ok || got != tc.want {
			t.Errorf("%s{queue=%s, state=%s} = %d (present: %v), want %d (the driver's Stats of the queue)", errandotel.MetricQueueDepth, tc.queue, tc.state, got, ok, tc.want)
		}
	}
}

// The Prometheus handler serves the counters, the histogram and the queue
// depth in the text format.
func TestPrometheusHandler(t *testing.T) {
	t.Parallel()
	broker := memorybroker.New(nil)
	h, mp, err := errandotel.PrometheusHandler(errandotel.PrometheusConfig{Broker: broker, Queues: []string{"work", "backlog"}})
	if err != nil {
		t.Fatalf("PrometheusHandler: %v", err)
	}
	t.Cleanup(func() { mp.Shutdown(t.Context()) })
	inst, err := errandotel.New(errandotel.Config{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: memorybackend.New(nil), DefaultQueue: "work",
		SendMiddleware: []errand.SendMiddleware{inst.SendMiddleware()}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register("ok", func() error { return nil })
	srv.Register("bad", func() error { return errand.Permanent(errors.New("no")) })
	w := srv.NewWorker(errand.WorkerConfig{Middleware: []errand.Middleware{inst.Middleware()}})
	w.Start()
	ctx := testCtx(t)
	var results []*errand.AsyncResult
	for _, name := range []string{"ok", "ok", "ok", "bad"} {
		res, err := srv.SendTask(ctx, errand.NewSignature(name))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	for range 2 {
		sig := errand.NewSignature("ok")
		sig.RoutingKey = "backlog"
		if _, err := srv.SendTask(ctx, sig); err != nil {
			t.Fatal(err)
		}
	}
	for _, res := range results {
		if _, err := res.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	hs := httptest.NewServer(http.StripPrefix("/metrics", h))
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	text := string(body)
	for _, want := range []struct{ re, why string }{
		{`errand_tasks_started_total\{[^}]*errand_task_name="ok"[^}]*messaging_destination_name="work"[^}]*\} 3\n`, "3 ok attempts started"},
		{`errand_tasks_succeeded_total\{[^}]*errand_task_name="ok"[^}]*\} 3\n`, "3 ok attempts succeeded"},
		{`errand_tasks_failed_total\{[^}]*errand_task_name="bad"[^}]*\} 1\n`, "1 bad attempt failed"},
		{`errand_tasks_sent_total\{[^}]*errand_task_name="ok"[^}]*messaging_destination_name="backlog"[^}]*\} 2\n`, "2 ok sent to backlog"},
		{`errand_task_duration_seconds_count\{[^}]*errand_task_name="ok"[^}]*\} 3\n`, "3 ok run times"},
		{`errand_task_duration_seconds_bucket\{[^}]*errand_task_name="ok"[^}]*le="\+Inf"[^}]*\} 3\n`, "the run-time histogram's buckets"},
		{`# TYPE errand_task_duration_seconds histogram\n`, "a histogram"},
		{`errand_queue_depth\{[^}]*messaging_destination_name="backlog"[^}]*state="pending"[^}]*\} 2\n`, "2 pending on backlog"},
		{`errand_queue_depth\{[^}]*messaging_destination_name="work"[^}]*state="pending"[^}]*\} 0\n`, "work drained"},
	} {
		if !regexp.MustCompile(want.re).MatchString(text) {
			t.Errorf("/metrics lacks %s (%s); it serves:\n%s", want.re, want.why, grepErrand(text))
		}
	}
}

func grepErrand(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "errand_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ObserveAllQueues reports every queue the broker lists, listed again at
// each collection: a queue that appears between two collections is in the
// second.
func TestMetricsAllQueues(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(*errand.Server) {})
	ctx := testCtx(t)
	if _, err := r.inst.ObserveAllQueues(r.srv); err != nil {
		t.Fatalf("ObserveAllQueues: %v", err)
	}
	send := func(queue string, n int) {
		for range n {
			sig := errand.NewSignature("nobody")
			sig.RoutingKey = queue
			if _, err := r.srv.SendTask(ctx, sig); err != nil {
				t.Fatal(err)
			}
		}
	}
	depth := func(rm metricdata.ResourceMetrics, queue string) (int64, bool) {
		return sumOf(rm, errandotel.MetricQueueDepth, attribute.String("messaging.destination.name", queue), attribute.String("state", "pending"))
	}
	send("first", 2)
	rm := collect(t, r.reader)
	if got, ok := depth(rm, "first"); !ok || got != 2 {
		t.Errorf("%s{queue=first, state=pending} = %d (present: %v), want 2: every listed queue is reported", errandotel.MetricQueueDepth, got, ok)
	}
	if _, ok := depth(rm, "later"); ok {
		t.Errorf("queue later reported before anything was sent to it")
	}
	send("later", 3)
	rm = collect(t, r.reader)
	for q, want := range map[string]int64{"first": 2, "later": 3} {
		if got, ok := depth(rm, q); !ok || got != want {
			t.Errorf("%s{queue=%s, state=pending} = %d (present: %v), want %d: the queues are listed again at each collection", errandotel.MetricQueueDepth, q, got, ok, want)
		}
	}
}

// noLister hides the memory broker's optional capabilities (QueueLister among
// them): srv.Queues fails with errors.ErrUnsupported.
type noLister struct{ errand.Broker }

// A broker that cannot list its queues reports no depth and logs why at
// Warn; the collection itself does not fail.
func TestMetricsAllQueuesUnsupported(t *testing.T) {
	t.Parallel()
	var logs lockedOutput
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	inst, err := errandotel.New(errandotel.Config{MeterProvider: mp, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: noLister{memorybroker.New(nil)}, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.ObserveAllQueues(srv); err != nil {
		t.Fatalf("ObserveAllQueues: %v", err)
	}
	rm := collect(t, reader)
	if m, ok := findMetric(rm, errandotel.MetricQueueDepth); ok {
		if g, _ := m.Data.(metricdata.Gauge[int64]); len(g.DataPoints) > 0 {
			t.Errorf("a broker that cannot list queues must report no depth, got %v", g.DataPoints)
		}
	}
	if !strings.Contains(logs.String(), "listing the queues failed") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the failed listing must be logged at Warn, got logs:\n%s", logs.String())
	}
	if _, err := inst.ObserveAllQueues(nil); err == nil {
		t.Errorf("ObserveAllQueues(nil) must fail")
	}
}

// PrometheusConfig.Server puts every listed queue's depth on /metrics;
// Broker and Server together are refused.
func TestPrometheusHandlerAllQueues(t *testing.T) {
	t.Parallel()
	broker := memorybroker.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := errandotel.PrometheusHandler(errandotel.PrometheusConfig{Broker: broker, Server: srv}); err == nil {
		t.Errorf("PrometheusHandler with both Broker and Server must fail (two gauges of the same queues)")
	}
	h, mp, err := errandotel.PrometheusHandler(errandotel.PrometheusConfig{Server: srv})
	if err != nil {
		t.Fatalf("PrometheusHandler: %v", err)
	}
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	ctx := testCtx(t)
	for _, q := range []string{"alpha", "beta", "beta"} {
		sig := errand.NewSignature("nobody")
		sig.RoutingKey = q
		if _, err := srv.SendTask(ctx, sig); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []struct{ re, why string }{
		{`errand_queue_depth\{[^}]*messaging_destination_name="alpha"[^}]*state="pending"[^}]*\} 1\n`, "1 pending on alpha"},
		{`errand_queue_depth\{[^}]*messaging_destination_name="beta"[^}]*state="pending"[^}]*\} 2\n`, "2 pending on beta"},
	} {
		if !regexp.MustCompile(want.re).MatchString(text) {
			t.Errorf("/metrics lacks %s (%s); it serves:\n%s", want.re, want.why, grepErrand(text))
		}
	}
}

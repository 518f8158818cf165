package errandotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The metrics' names. Each task metric has the attributes errand.task.name
// and messaging.destination.name (the queue); the queue depth has the queue
// and state (pending, delayed, in_flight or dead). Through the Prometheus
// exporter dots become underscores, counters end in _total and the
// histogram in _seconds: errand_tasks_started_total,
// errand_task_duration_seconds_bucket, errand_queue_depth, and so on.
const (
	MetricTasksSent      = "errand.tasks.sent"      // counter: signatures the broker accepted
	MetricTasksStarted   = "errand.tasks.started"   // counter: attempts started on a worker
	MetricTasksSucceeded = "errand.tasks.succeeded" // counter: attempts recorded SUCCESS
	MetricTasksRetried   = "errand.tasks.retried"   // counter: attempts recorded RETRY (a retry is scheduled)
	MetricTasksFailed    = "errand.tasks.failed"    // counter: attempts recorded FAILURE (failed for good)
	MetricTasksInFlight  = "errand.tasks.in_flight" // up-down counter: attempts running now
	MetricTaskDuration   = "errand.task.duration"   // histogram, seconds: run time of an attempt
	MetricQueueDepth     = "errand.queue.depth"     // gauge: messages in a queue, by state
)

// StateKey is the attribute of the queue depth that says which count it is:
// pending, delayed, in_flight or dead (see errand.QueueStats).
const StateKey = attribute.Key("state")

// durationBuckets are the run-time histogram's bucket bounds, in seconds:
// the messaging conventions' advice, stretched for tasks that run minutes.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300, 900}

type instruments struct {
	sent, started, succeeded, retried, failed metric.Int64Counter
	inFlight                                  metric.Int64UpDownCounter
	duration                                  metric.Float64Histogram
}

func (m *instruments) init(meter metric.Meter) error {
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{task}"))
		errs = append(errs, err)
		return c
	}
	m.sent = counter(MetricTasksSent, "Tasks sent: signatures the broker accepted, retries and callbacks included.")
	m.started = counter(MetricTasksStarted, "Task attempts started on a worker.")
	m.succeeded = counter(MetricTasksSucceeded, "Task attempts that succeeded.")
	m.retried = counter(MetricTasksRetried, "Task attempts that failed with a retry scheduled.")
	m.failed = counter(MetricTasksFailed, "Task attempts that failed for good.")
	var err error
	m.inFlight, err = meter.Int64UpDownCounter(MetricTasksInFlight,
		metric.WithDescription("Task attempts running now."), metric.WithUnit("{task}"))
	errs = append(errs, err)
	m.duration, err = meter.Float64Histogram(MetricTaskDuration,
		metric.WithDescription("Run time of a task attempt, middleware inside errandotel's included."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// StatsTimeout bounds the broker calls of one queue-depth observation.
const StatsTimeout = 5 * time.Second

// ObserveQueues reports the depth of each queue of broker (a driver, as
// its constructor, errand.OpenBroker or errand.Server.Broker returns it)
// as the gauge errand.queue.depth, one point per queue and state (pending,
// delayed, in_flight, dead), read with the broker's driver.StatsReporter
// each time the meter provider collects (a Prometheus scrape, a periodic
// reader's tick). A queue whose
// stats cannot be read (the broker lacks the capability, or the call fails
// within [StatsTimeout]) is left out of that collection and logged at Warn
// on Config.Logger. Unregister the returned registration to stop.
//
// To report every queue there is, as queues come and go, see
// [Instrumentation.ObserveAllQueues].
func (in *Instrumentation) ObserveQueues(broker errand.Broker, queues ...string) (metric.Registration, error) {
	if broker == nil {
		return nil, errors.New("errandotel: ObserveQueues: nil broker")
	}
	queues = append([]string(nil), queues...)
	return in.observeDepth(func(ctx context.Context, report func(string, errand.QueueStats)) {
		for _, q := range queues {
			st, err := stats(ctx, broker, q)
			if err != nil {
				in.log.WarnContext(ctx, "errandotel: queue depth not observed", "queue", q, "err", err)
				continue
			}
			report(q, st)
		}
	})
}

// ObserveAllQueues reports the depth of every queue srv's broker lists, as
// [Instrumentation.ObserveQueues] does for named queues: at each
// collection it lists the queues and their counts again with
// srv.Queues (the broker's driver.QueueLister and driver.StatsReporter),
// within [StatsTimeout], so a queue that appears is reported from the next
// collection on and one that is deleted stops being reported. When the
// listing fails (an outage, a broker without driver.QueueLister) no depth
// is reported in that collection and the error is logged at Warn on
// Config.Logger. A broker that lists queues without counting them
// (no driver.StatsReporter) reports zeros. Unregister the returned
// registration to stop.
func (in *Instrumentation) ObserveAllQueues(srv *errand.Server) (metric.Registration, error) {
	if srv == nil {
		return nil, errors.New("errandotel: ObserveAllQueues: nil server")
	}
	return in.observeDepth(func(ctx context.Context, report func(string, errand.QueueStats)) {
		qs, err := srv.Queues(ctx)
		if err != nil {
			in.log.WarnContext(ctx, "errandotel: queue depth not observed: listing the queues failed", "err", err)
			return
		}
		for _, q := range qs {
			report(q.Name, q.Stats)
		}
	})
}

// observeDepth registers the queue-depth gauge's callback: read, bounded
// by StatsTimeout, calls report once per queue whose stats it read.
func (in *Instrumentation) observeDepth(read func(ctx context.Context, report func(queue string, st errand.QueueStats))) (metric.Registration, error) {
	gauge, err := in.meter.Int64ObservableGauge(MetricQueueDepth,
		metric.WithDescription("Messages in a queue, by state (pending, delayed, in_flight, dead)."),
		metric.WithUnit("{message}"))
	if err != nil {
		return nil, fmt.Errorf("errandotel: %w", err)
	}
	reg, err := in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, StatsTimeout)
		defer cancel()
		read(ctx, func(q string, st errand.QueueStats) {
			queue := semconv.MessagingDestinationName(q)
			for _, p := range []struct {
				state string
				n     int
			}{{"pending", st.Pending}, {"delayed", st.Delayed}, {"in_flight", st.InFlight}, {"dead", st.Dead}} {
				o.ObserveInt64(gauge, int64(p.n), metric.WithAttributes(queue, StateKey.String(p.state)))
			}
		})
		return nil
	}, gauge)
	if err != nil {
		return nil, fmt.Errorf("errandotel: %w", err)
	}
	return reg, nil
}

// stats reads queue's counts from broker's driver.StatsReporter, or
// returns an error satisfying errors.Is(err, errors.ErrUnsupported).
func stats(ctx context.Context, broker errand.Broker, queue string) (errand.QueueStats, error) {
	sr, ok := broker.(driver.StatsReporter)
	if !ok {
		return errand.QueueStats{}, fmt.Errorf("errandotel: %T does not count queues (driver.StatsReporter): %w", broker, errors.ErrUnsupported)
	}
	return sr.Stats(ctx, queue)
}

// Package errandotel traces and measures errand with OpenTelemetry, and
// serves the measures to Prometheus. It is built on errand's middleware:
// nothing in errand itself depends on OpenTelemetry, and a program that
// does not import this module does not pay for it.
//
// # Wiring
//
// One [Instrumentation] gives both sides their middleware: the producer's
// goes in errand.Config.SendMiddleware (it also wraps the worker's retries
// and callbacks, which a server's workers send), the worker's first in
// errand.WorkerConfig.Middleware.
//
//	inst, err := errandotel.New(errandotel.Config{TracerProvider: tp, MeterProvider: mp})
//	srv, err := errand.NewServer(errand.Config{
//		Broker: b, Backend: be,
//		SendMiddleware: []errand.SendMiddleware{inst.SendMiddleware()},
//	})
//	w := srv.NewWorker(errand.WorkerConfig{Middleware: []errand.Middleware{inst.Middleware()}})
//
// Providers default to the global ones (otel.GetTracerProvider,
// otel.GetMeterProvider); the propagator defaults to W3C trace context.
//
// # Traces
//
// Every signature sent gets a span of kind Producer, "send <task name>",
// child of the span in the sender's context; its trace context travels in
// Signature.Headers (traceparent and tracestate with the default
// propagator). Every attempt a worker runs gets a span of kind Consumer,
// "process <task name>", child of that producer span, so one trace goes
// from the caller's span through the broker to the task's function, which
// receives the consumer span in its context. A retry is sent from inside
// the failed attempt's span, so every attempt of a task appears in the same
// trace, one consumer span each; so do a chain's next tasks and OnSuccess
// and OnError callbacks.
//
// A chord's callback runs once, after all its members: its spans are the
// children of the send by the member that completed the chord, and carry
// a [trace.Link] to the producer spans of its first Config.MaxChordLinks
// members, 128 by default (recorded in the callback's [ChordMembersHeader]
// when the chord is sent; every member's message carries the callback, so
// the list is capped).
//
// Span attributes follow the OpenTelemetry messaging conventions:
// messaging.system "errand", messaging.destination.name (the queue),
// messaging.message.id (the task UUID), messaging.operation.type and
// messaging.operation.name ("send" or "process"), plus [TaskNameKey],
// [AttemptKey], [GroupUUIDKey] for group members and, on consumer spans,
// [TaskStateKey], the state the attempt was recorded in. A consumer span
// has status Error when the task's function returned an error (RETRY or
// FAILURE); a producer span when the broker refused the send.
//
// # Metrics
//
// The worker middleware counts attempts by task name and queue:
// errand.tasks.started, then one of errand.tasks.succeeded,
// errand.tasks.retried and errand.tasks.failed by the state recorded (none
// when nothing was recorded: a shutdown gave the task back, or the backend
// failed and the delivery will come again); errand.tasks.in_flight counts
// the attempts running; errand.task.duration is their run time in seconds.
// The send middleware counts errand.tasks.sent. [Instrumentation.ObserveQueues]
// adds errand.queue.depth, read with the broker's driver.StatsReporter at each collection: one
// point per queue and state (pending, delayed, in_flight, dead);
// [Instrumentation.ObserveAllQueues] does it for every queue a server's
// broker lists, listed again at each collection. The names are constants
// (MetricTasksStarted, ...).
//
// # Prometheus
//
// [PrometheusHandler] makes a meter provider read by the OpenTelemetry
// Prometheus exporter into a registry of its own, and the http.Handler that
// serves it; mount the handler on /metrics and give the provider to
// [Config].MeterProvider:
//
//	h, mp, err := errandotel.PrometheusHandler(errandotel.PrometheusConfig{Broker: b, Queues: []string{"default"}})
//	inst, err := errandotel.New(errandotel.Config{MeterProvider: mp})
//	http.Handle("/metrics", h)
//
// PrometheusConfig.Server instead of Broker and Queues observes every
// queue (what `errand web` serves on /metrics).
//
// The names read as Prometheus names: errand_tasks_started_total,
// errand_task_duration_seconds (a histogram), errand_tasks_in_flight,
// errand_queue_depth, with labels errand_task_name,
// messaging_destination_name and state.
package errandotel

package errandotel

import (
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter this
// package creates.
const ScopeName = "github.com/errand-go/errand/otel"

// Config configures an [Instrumentation]. The zero value uses the global
// providers and W3C trace context.
type Config struct {
	// TracerProvider makes the producer and consumer spans.
	// Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the task counters, the run-time histogram, the
	// in-flight counter and the queue-depth gauge. A provider from
	// [PrometheusHandler] serves them on /metrics.
	// Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the trace context into Signature.Headers when a
	// task is sent and reads it back when it runs. Producer and worker must
	// agree on it. Default: propagation.TraceContext{} (the traceparent and
	// tracestate headers), not the global propagator, which is a no-op
	// until set.
	Propagator propagation.TextMapPropagator
	// Logger receives the queue-depth reads that fail (at Warn).
	// Default: discard.
	Logger *slog.Logger
	// MaxChordLinks is how many members of a chord, the first in group
	// order, its callback's spans link to: their trace contexts travel in
	// the callback's [ChordMembersHeader], which every member's message
	// carries, so the header must stay small for a large chord. Negative:
	// no links. Default: 128, the OpenTelemetry SDK's default limit of
	// links per span.
	MaxChordLinks int
}

// DefaultMaxChordLinks is the default of Config.MaxChordLinks.
const DefaultMaxChordLinks = 128

// Instrumentation traces and measures errand: its [Instrumentation.SendMiddleware]
// goes in errand.Config.SendMiddleware, its [Instrumentation.Middleware] in
// errand.WorkerConfig.Middleware, and [Instrumentation.ObserveQueues]
// reports the depth of queues. It is safe for concurrent use.
type Instrumentation struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	maxLinks int // Config.MaxChordLinks, 0 for none
	log      *slog.Logger
	meter    metric.Meter
	m        instruments
}

// New returns an Instrumentation with cfg's providers. It fails only if
// the meter provider refuses an instrument.
func New(cfg Config) (*Instrumentation, error) {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxLinks := cfg.MaxChordLinks
	switch {
	case maxLinks == 0:
		maxLinks = DefaultMaxChordLinks
	case maxLinks < 0:
		maxLinks = 0
	}
	in := &Instrumentation{
		maxLinks: maxLinks,
		tracer:   tp.Tracer(ScopeName),
		prop:     prop,
		log:      log,
		meter:    mp.Meter(ScopeName),
	}
	if err := in.m.init(in.meter); err != nil {
		return nil, fmt.Errorf("errandotel: %w", err)
	}
	return in, nil
}

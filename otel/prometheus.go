package errandotel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/errand-go/errand"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// PrometheusConfig configures [PrometheusHandler].
type PrometheusConfig struct {
	// Registerer is where the exporter registers its collector.
	// Default: a new prometheus.Registry of its own (never the global
	// prometheus.DefaultRegisterer unless given here).
	Registerer prometheus.Registerer
	// Gatherer is what the handler serves. Default: Registerer, which must
	// then be a Gatherer too (a *prometheus.Registry is both).
	Gatherer prometheus.Gatherer
	// Broker and Queues, if Broker is set, add the queue-depth gauge of
	// those queues (see [Instrumentation.ObserveQueues]). Default: none.
	Broker errand.Broker
	Queues []string
	// Server, if set, adds the queue-depth gauge of every queue its broker
	// lists, listed again at each scrape (see
	// [Instrumentation.ObserveAllQueues]); set it or Broker, not both.
	// Default: none.
	Server *errand.Server
	// Logger receives the queue-depth reads that fail (at Warn).
	// Default: discard.
	Logger *slog.Logger
	// Options are further meter provider options (a resource, views).
	// The Prometheus reader is always added.
	Options []sdkmetric.Option
}

// PrometheusHandler returns an http.Handler serving, in the Prometheus
// text format, every metric of the returned meter provider, read through
// the OpenTelemetry Prometheus exporter at each scrape. Mount it on
// /metrics, and give the provider to [Config].MeterProvider of the
// Instrumentation whose middleware the server and workers use. Call the
// provider's Shutdown when done.
//
//	h, mp, err := errandotel.PrometheusHandler(errandotel.PrometheusConfig{Broker: b, Queues: []string{"default"}})
//	mux.Handle("/metrics", h)
//
// With PrometheusConfig.Server instead of Broker, errand_queue_depth has
// every queue the server's broker lists (what `errand web` serves).
func PrometheusHandler(cfg PrometheusConfig) (http.Handler, *sdkmetric.MeterProvider, error) {
	if cfg.Broker != nil && cfg.Server != nil {
		return nil, nil, errors.New("errandotel: PrometheusHandler: set Broker (and Queues) or Server, not both")
	}
	reg, gat := cfg.Registerer, cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg = r
		if gat == nil {
			gat = r
		}
	}
	if gat == nil {
		g, ok := reg.(prometheus.Gatherer)
		if !ok {
			return nil, nil, errors.New("errandotel: PrometheusHandler: Registerer is not a Gatherer and no Gatherer is set")
		}
		gat = g
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("errandotel: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(append(append([]sdkmetric.Option(nil), cfg.Options...), sdkmetric.WithReader(exp))...)
	if cfg.Broker != nil || cfg.Server != nil {
		in, err := New(Config{MeterProvider: mp, Logger: cfg.Logger})
		if err == nil {
			if cfg.Server != nil {
				_, err = in.ObserveAllQueues(cfg.Server)
			} else {
				_, err = in.ObserveQueues(cfg.Broker, cfg.Queues...)
			}
		}
		if err != nil {
			mp.Shutdown(context.Background())
			return nil, nil, err
		}
	}
	return promhttp.HandlerFor(gat, promhttp.HandlerOpts{}), mp, nil
}

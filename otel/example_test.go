package errandotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	errandotel "github.com/errand-go/errand/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A task sent inside the caller's span runs in a consumer span, child of
// the producer span of its send, in the caller's trace.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	inst, err := errandotel.New(errandotel.Config{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	srv, _ := errand.NewServer(errand.Config{
		Broker:         memorybroker.New(nil),
		Backend:        memorybackend.New(nil),
		SendMiddleware: []errand.SendMiddleware{inst.SendMiddleware()},
	})
	srv.Register("add", func(a, b int) (int, error) { return a + b, nil })
	w := srv.NewWorker(errand.WorkerConfig{Middleware: []errand.Middleware{inst.Middleware()}})
	w.Start()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx, caller := tp.Tracer("example").Start(ctx, "handle request")
	r, err := srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
	if err != nil {
		panic(err)
	}
	caller.End()
	var sum int
	if err := r.GetInto(ctx, &sum); err != nil {
		panic(err)
	}
	w.Shutdown(ctx) // every attempt's span has ended once it returns

	names := map[string]string{caller.SpanContext().SpanID().String(): "handle request"}
	for _, s := range spans.Ended() {
		names[s.SpanContext().SpanID().String()] = s.Name()
	}
	// Spans end in any order (the send's ends once PENDING is recorded,
	// which may be after the task ran): print the producer's first.
	var lines []string
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID() == caller.SpanContext().TraceID() && s.Parent().IsValid() {
			line := fmt.Sprintf("%s (%s), child of %s", s.Name(), s.SpanKind(), names[s.Parent().SpanID().String()])
			if s.SpanKind() == trace.SpanKindProducer {
				lines = append([]string{line}, lines...)
			} else {
				lines = append(lines, line)
			}
		}
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println("2 + 3 =", sum)
	// Output:
	// send add (producer), child of handle request
	// process add (consumer), child of send add
	// 2 + 3 = 5
}

package errandotel

import (
	"context"
	"time"

	"github.com/errand-go/errand"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of errand's own, next to the messaging semantic
// conventions' messaging.system ("errand"), messaging.destination.name (the
// queue), messaging.message.id (the task UUID) and
// messaging.operation.type and .name ("send" or "process").
const (
	// TaskNameKey is the registered task name.
	TaskNameKey = attribute.Key("errand.task.name")
	// AttemptKey is the 1-based attempt number.
	AttemptKey = attribute.Key("errand.attempt")
	// TaskStateKey is the state a consumer span's attempt was recorded in:
	// SUCCESS, RETRY or FAILURE (absent when nothing was recorded).
	TaskStateKey = attribute.Key("errand.task.state")
	// GroupUUIDKey is the group (or chord) a task belongs to.
	GroupUUIDKey = attribute.Key("errand.group.uuid")
)

// ChordMembersHeader is the header of a chord's callback that carries the
// trace context of the members' producer spans (a list of propagator
// carriers, one map per member, in group order, at most
// Config.MaxChordLinks of them: the first members), so that the callback's
// spans link to the members that made it run.
const ChordMembersHeader = "errand-chord-members"

// SenderHeader is set by the worker middleware on the signatures an
// attempt may send (the retry, which copies the signature itself, its
// OnSuccess and OnError callbacks and its chord's callback): the trace
// context of the attempt's consumer span, for SendMiddleware to use as the
// parent of their producer spans. errand sends retries and callbacks with a
// context of its own, not the task's, so the span cannot travel there.
// SendMiddleware removes it from what it sends.
const SenderHeader = "errand-otel-sender"

const systemName = "errand"

// headerCarrier lets a propagator read and write Signature.Headers.
type headerCarrier errand.Headers

func (h headerCarrier) Get(key string) string {
	s, _ := h[key].(string)
	return s
}

func (h headerCarrier) Set(key, value string) { h[key] = value }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k, v := range h {
		if _, ok := v.(string); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func attempt(sig *errand.Signature) int { return max(sig.Attempt, 1) }

func spanAttrs(sig *errand.Signature, op attribute.KeyValue, opName string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(systemName),
		semconv.MessagingDestinationName(sig.RoutingKey),
		semconv.MessagingMessageID(sig.UUID),
		op,
		semconv.MessagingOperationName(opName),
		TaskNameKey.String(sig.Name),
		AttemptKey.Int(attempt(sig)),
	}
	if sig.GroupUUID != "" {
		attrs = append(attrs, GroupUUIDKey.String(sig.GroupUUID))
	}
	return attrs
}

// SendMiddleware returns the producer side, for errand.Config.SendMiddleware:
// each signature sent gets a span of kind Producer named "send <task
// name>", a child of the span in the sender's context (for a retry or a
// callback, the consumer span of the attempt that sends it); its trace
// context is written into the signature's headers through the propagator,
// replacing what an earlier hop left there. The spans end when the broker
// has taken the signatures, with status Error if it refused them.
//
// The span of a chord member's first send is also recorded in its
// callback's [ChordMembersHeader], for the callback's spans to link to, up
// to Config.MaxChordLinks members. The members sent together share one copy
// of their callback, which carries the header: the caller's callback
// signature is left as it was, so sending the chord again records each
// member once.
func (in *Instrumentation) SendMiddleware() errand.SendMiddleware {
	return func(next errand.SendHandler) errand.SendHandler {
		return func(ctx context.Context, sigs []*errand.Signature) error {
			spans := make([]trace.Span, len(sigs))
			var callbacks map[*errand.Signature]*errand.Signature // caller's -> the copy sent
			for i, sig := range sigs {
				pctx := ctx
				if c := carrierOf(sig.Headers[SenderHeader]); c != nil {
					delete(sig.Headers, SenderHeader)
					if !trace.SpanContextFromContext(ctx).IsValid() {
						pctx = in.prop.Extract(ctx, c)
					}
				}
				opts := []trace.SpanStartOption{
					trace.WithSpanKind(trace.SpanKindProducer),
					trace.WithAttributes(spanAttrs(sig, semconv.MessagingOperationTypeSend, "send")...),
				}
				if links := in.memberLinks(ctx, sig); len(links) > 0 {
					opts = append(opts, trace.WithLinks(links...))
				}
				sctx, span := in.tracer.Start(pctx, "send "+sig.Name, opts...)
				spans[i] = span
				if sig.Headers == nil {
					sig.Headers = errand.Headers{}
				}
				for _, f := range in.prop.Fields() {
					delete(sig.Headers, f)
				}
				in.prop.Inject(sctx, headerCarrier(sig.Headers))
				if cb := sig.ChordCallback; cb != nil && sig.GroupUUID != "" && attempt(sig) == 1 {
					// A first send of a chord member: the callback links to it.
					// (A retry resends the member with its own copy of the
					// callback; the first send is the one the chord recorded.)
					if callbacks == nil {
						callbacks = make(map[*errand.Signature]*errand.Signature)
					}
					own, ok := callbacks[cb]
					if !ok {
						own = cb.Copy()
						if own.Headers == nil {
							own.Headers = errand.Headers{}
						}
						delete(own.Headers, ChordMembersHeader)
						callbacks[cb] = own
					}
					sig.ChordCallback = own
					if list, _ := own.Headers[ChordMembersHeader].([]any); len(list) < in.maxLinks {
						c := propagation.MapCarrier{}
						in.prop.Inject(sctx, c)
						own.Headers[ChordMembersHeader] = append(list, map[string]string(c))
					}
				}
			}
			err := next(ctx, sigs)
			for i, span := range spans {
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				} else {
					in.m.sent.Add(ctx, 1, metric.WithAttributeSet(taskSet(sigs[i])))
				}
				span.End()
			}
			return err
		}
	}
}

// memberLinks returns links to the producer spans listed in sig's
// ChordMembersHeader, in the form SendMiddleware writes it or as it reads
// back from JSON: Config.MaxChordLinks at most.
func (in *Instrumentation) memberLinks(ctx context.Context, sig *errand.Signature) []trace.Link {
	list, _ := sig.Headers[ChordMembersHeader].([]any)
	var links []trace.Link
	for _, item := range list {
		if len(links) >= in.maxLinks {
			break
		}
		c := carrierOf(item)
		if c == nil {
			continue
		}
		sc := trace.SpanContextFromContext(in.prop.Extract(context.Background(), c))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

// carrierOf reads a propagator carrier stored in a header: a
// map[string]string as written, or a map[string]any as read back from
// JSON. Nil if v is neither.
func carrierOf(v any) propagation.MapCarrier {
	switch m := v.(type) {
	case map[string]string:
		return propagation.MapCarrier(m)
	case map[string]any:
		c := propagation.MapCarrier{}
		for k, v := range m {
			if s, ok := v.(string); ok {
				c[k] = s
			}
		}
		return c
	}
	return nil
}

// markSender sets SenderHeader, the trace context of ctx's span, on sig
// (its retry copies it) and on what an attempt of sig may send.
func (in *Instrumentation) markSender(ctx context.Context, sig *errand.Signature) {
	c := propagation.MapCarrier{}
	in.prop.Inject(ctx, c)
	if len(c) == 0 {
		return
	}
	mark := func(s *errand.Signature) {
		if s == nil {
			return
		}
		if s.Headers == nil {
			s.Headers = errand.Headers{}
		}
		s.Headers[SenderHeader] = map[string]string(c)
	}
	mark(sig)
	for _, s := range sig.OnSuccess {
		mark(s)
	}
	for _, s := range sig.OnError {
		mark(s)
	}
	if cb := sig.ChordCallback; cb != nil {
		mark(cb)
		for _, s := range cb.OnError {
			mark(s)
		}
	}
}

// Middleware returns the worker side, for errand.WorkerConfig.Middleware
// (put it first, outermost, so that it times and sees everything the
// others do): each attempt gets a span of kind Consumer named "process
// <task name>", the child of the producer span whose context the headers
// carry (so the caller's trace continues on the worker), linked to the
// members' producer spans if it is a chord's callback. The task's function
// receives the span in its context. The span records the state the attempt
// ended in (errand.task.state) and has status Error when the function
// failed.
//
// It also counts the attempt: started, then succeeded, retried or failed by
// the state recorded, its run time, and the attempts in flight (see
// [Instrumentation] metrics in the package documentation).
func (in *Instrumentation) Middleware() errand.Middleware {
	return func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (st *errand.TaskState, err error) {
			parent := in.prop.Extract(ctx, headerCarrier(sig.Headers))
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(spanAttrs(sig, semconv.MessagingOperationTypeProcess, "process")...),
			}
			if links := in.memberLinks(ctx, sig); len(links) > 0 {
				opts = append(opts, trace.WithLinks(links...))
			}
			ctx, span := in.tracer.Start(parent, "process "+sig.Name, opts...)
			in.markSender(ctx, sig)
			set := metric.WithAttributeSet(taskSet(sig))
			in.m.started.Add(ctx, 1, set)
			in.m.inFlight.Add(ctx, 1, set)
			start := time.Now()
			defer func() {
				in.m.inFlight.Add(ctx, -1, set)
				in.m.duration.Record(ctx, time.Since(start).Seconds(), set)
				if st != nil {
					span.SetAttributes(TaskStateKey.String(string(st.State)))
					switch st.State {
					case errand.StateSuccess:
						in.m.succeeded.Add(ctx, 1, set)
					case errand.StateRetry:
						in.m.retried.Add(ctx, 1, set)
					case errand.StateFailure:
						in.m.failed.Add(ctx, 1, set)
					}
				}
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				} else if st != nil && st.State == errand.StateFailure {
					span.SetStatus(codes.Error, "task "+sig.Name+" failed: "+st.Error)
				}
				span.End()
			}()
			return next(ctx, sig)
		}
	}
}

// taskSet is the attribute set of the task metrics.
func taskSet(sig *errand.Signature) attribute.Set {
	return attribute.NewSet(TaskNameKey.String(sig.Name), semconv.MessagingDestinationName(sig.RoutingKey))
}

package errandotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/errand-go/errand"
	errandotel "github.com/errand-go/errand/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The caller's span, the producer span and the worker's consumer span form
// one trace, each the parent of the next, and the task's function runs in
// the consumer span.
func TestTraceProducerToConsumer(t *testing.T) {
	t.Parallel()
	inTask := make(chan trace.SpanContext, 1)
	r := newRig(t, func(srv *errand.Server) {
		srv.Register("add", func(ctx context.Context, a, b int) (int, error) {
			inTask <- trace.SpanContextFromContext(ctx)
			return a + b, nil
		})
	})
	ctx, parent := r.tp.Tracer("test").Start(testCtx(t), "caller")
	sig := errand.NewSignature("add", 2, 3)
	res, err := r.srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatalf("SendTask: %v", err)
	}
	parent.End()
	var sum int
	if err := res.GetInto(ctx, &sum); err != nil || sum != 5 {
		t.Fatalf("add(2, 3) = %d, %v; want 5", sum, err)
	}
	r.stop(t)

	prod, cons := r.spansNamed("send add"), r.spansNamed("process add")
	if len(prod) != 1 || len(cons) != 1 {
		t.Fatalf("one task sent and run once must make one producer and one consumer span; got %d and %d", len(prod), len(cons))
	}
	p, c := prod[0], cons[0]
	if !isChildOf(p, parent.SpanContext()) {
		t.Errorf("the producer span must be the child of the caller's span %v; its parent is %v", parent.SpanContext().SpanID(), p.Parent().SpanID())
	}
	if !isChildOf(c, p.SpanContext()) {
		t.Errorf("the consumer span must be the child of the producer span %v (trace %v), carried in the headers; its parent is %v in trace %v",
			p.SpanContext().SpanID(), p.SpanContext().TraceID(), c.Parent().SpanID(), c.SpanContext().TraceID())
	}
	if !c.Parent().IsRemote() {
		t.Errorf("the consumer span's parent must be the remote context read from the headers")
	}
	if got := <-inTask; got.SpanID() != c.SpanContext().SpanID() {
		t.Errorf("the task's function must run in the consumer span %v; its context holds %v", c.SpanContext().SpanID(), got.SpanID())
	}
	if p.SpanKind() != trace.SpanKindProducer || c.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("span kinds: producer %v, consumer %v; want producer, consumer", p.SpanKind(), c.SpanKind())
	}
	for _, tc := range []struct {
		span sdktraceSpan
		key  attribute.Key
		want attribute.Value
	}{
		{p, "messaging.system", attribute.StringValue("errand")},
		{p, "messaging.destination.name", attribute.StringValue(errand.DefaultQueue)},
		{p, "messaging.message.id", attribute.StringValue(sig.UUID)},
		{p, "messaging.operation.type", attribute.StringValue("send")},
		{p, "messaging.operation.name", attribute.StringValue("send")},
		{p, "errand.task.name", attribute.StringValue("add")},
		{p, "errand.attempt", attribute.IntValue(1)},
		{c, "messaging.system", attribute.StringValue("errand")},
		{c, "messaging.destination.name", attribute.StringValue(errand.DefaultQueue)},
		{c, "messaging.message.id", attribute.StringValue(sig.UUID)},
		{c, "messaging.operation.type", attribute.StringValue("process")},
		{c, "messaging.operation.name", attribute.StringValue("process")},
		{c, "errand.task.name", attribute.StringValue("add")},
		{c, "errand.attempt", attribute.IntValue(1)},
		{c, "errand.task.state", attribute.StringValue("SUCCESS")},
	} {
		if got := attr(tc.span, tc.key); got != tc.want {
			t.Errorf("%s span attribute %s = %v, want %v", tc.span.Name(), tc.key, got, tc.want)
		}
	}
	if c.Status().Code != codes.Unset {
		t.Errorf("a successful attempt's span has status %v, want Unset", c.Status())
	}
	if tp := sig.Headers["traceparent"]; tp == nil {
		t.Errorf("the signature's headers must carry the W3C traceparent; headers: %v", sig.Headers)
	}
}

// A task that fails: one consumer span per attempt, each with status Error
// and the state it ended in, every attempt in the caller's trace, each
// retry sent from inside the attempt before it.
func TestTraceRetriesAndFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(srv *errand.Server) {
		srv.Register("flaky", func() error { return errors.New("boom") })
	})
	ctx, parent := r.tp.Tracer("test").Start(testCtx(t), "caller")
	sig := errand.NewSignature("flaky")
	sig.RetryCount = 2
	res, err := r.srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatalf("SendTask: %v", err)
	}
	parent.End()
	if _, err := res.Get(ctx); err == nil {
		t.Fatalf("flaky must fail for good after its retries; it succeeded")
	}
	r.stop(t)

	cons, prod := r.spansNamed("process flaky"), r.spansNamed("send flaky")
	if len(cons) != 3 || len(prod) != 3 {
		t.Fatalf("RetryCount 2 means 3 attempts: want 3 consumer and 3 producer spans (send, 2 retries), got %d and %d", len(cons), len(prod))
	}
	byAttempt := map[int64]sdktraceSpan{}
	for _, c := range cons {
		byAttempt[attr(c, "errand.attempt").AsInt64()] = c
	}
	prodByAttempt := map[int64]sdktraceSpan{}
	for _, p := range prod {
		prodByAttempt[attr(p, "errand.attempt").AsInt64()] = p
	}
	wantState := map[int64]string{1: "RETRY", 2: "RETRY", 3: "FAILURE"}
	for n := int64(1); n <= 3; n++ {
		c, p := byAttempt[n], prodByAttempt[n]
		if c == nil || p == nil {
			t.Fatalf("attempt %d has no consumer or no producer span (consumer spans by attempt: %v)", n, len(byAttempt))
		}
		if got := attr(c, "errand.task.state").AsString(); got != wantState[n] {
			t.Errorf("attempt %d: errand.task.state = %q, want %q", n, got, wantState[n])
		}
		if c.Status().Code != codes.Error || c.Status().Description == "" {
			t.Errorf("attempt %d failed: its span must have status Error with the error; got %+v", n, c.Status())
		}
		if c.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("attempt %d is in trace %v, not the caller's %v", n, c.SpanContext().TraceID(), parent.SpanContext().TraceID())
		}
		if !isChildOf(c, p.SpanContext()) {
			t.Errorf("attempt %d's consumer span must be the child of its send's producer span", n)
		}
		if n > 1 && !isChildOf(p, byAttempt[n-1].SpanContext()) {
			t.Errorf("the retry sending attempt %d must be sent from inside attempt %d's span", n, n-1)
		}
	}
	if !isChildOf(prodByAttempt[1], parent.SpanContext()) {
		t.Errorf("the first send must be the child of the caller's span")
	}
}

// A chord's callback links to every member's producer span.
func TestTraceChordCallbackLinksMembers(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(srv *errand.Server) {
		srv.Register("square", func(x int) (int, error) { return x * x, nil })
		srv.Register("sum", func(xs ...int) (int, error) {
			s := 0
			for _, x := range xs {
				s += x
			}
			return s, nil
		})
	})
	ctx, parent := r.tp.Tracer("test").Start(testCtx(t), "caller")
	var members []*errand.Signature
	for i := 1; i <= 4; i++ {
		members = append(members, errand.NewSignature("square", i))
	}
	g, _ := errand.NewGroup(members...)
	ch, _ := errand.NewChord(g, errand.NewSignature("sum"))
	res, err := r.srv.SendChord(ctx, ch, errand.SendConcurrency(2))
	if err != nil {
		t.Fatalf("SendChord: %v", err)
	}
	parent.End()
	var sum int
	if err := res.GetInto(ctx, &sum); err != nil || sum != 30 {
		t.Fatalf("chord sum of squares 1..4 = %d, %v; want 30", sum, err)
	}
	r.stop(t)

	memberSends := r.spansNamed("send square")
	if len(memberSends) != 4 {
		t.Fatalf("each of the 4 members must get its own producer span; got %d", len(memberSends))
	}
	want := map[trace.SpanID]bool{}
	for _, p := range memberSends {
		want[p.SpanContext().SpanID()] = true
		if !isChildOf(p, parent.SpanContext()) {
			t.Errorf("member send %v must be the child of the caller's span", p.SpanContext().SpanID())
		}
	}
	cbs := r.spansNamed("process sum")
	if len(cbs) != 1 {
		t.Fatalf("the callback runs once: want 1 consumer span, got %d", len(cbs))
	}
	cb := cbs[0]
	got := map[trace.SpanID]bool{}
	for _, l := range cb.Links() {
		if l.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("link to %v is in trace %v, not the chord's %v", l.SpanContext.SpanID(), l.SpanContext.TraceID(), parent.SpanContext().TraceID())
		}
		got[l.SpanContext.SpanID()] = true
	}
	if len(cb.Links()) != 4 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the callback's consumer span must link to the 4 members' producer spans %v; it links to %v", want, got)
	}
	if cb.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("the callback must run in the chord's trace")
	}
	sends := r.spansNamed("send sum")
	if len(sends) != 1 || !isChildOf(cb, sends[0].SpanContext()) {
		t.Errorf("the callback's consumer span must be the child of its send (%d sends)", len(sends))
	}
}

// A large chord: every member's message carries its callback, so the
// callback's ChordMembersHeader holds at most Config.MaxChordLinks carriers
// (the first members'), not one per member (N members × N carriers); the
// callback's spans link to that many members; and the caller's callback
// signature is not changed, so sending the chord again (after a failed
// send) records each member once.
func TestTraceLargeChordHeaderIsCapped(t *testing.T) {
	t.Parallel()
	const members = 300
	for _, tc := range []struct {
		name string
		max  int // Config.MaxChordLinks
		want int // carriers and links
	}{
		{"default", 0, errandotel.DefaultMaxChordLinks},
		{"configured", 7, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu       sync.Mutex
				calls    int
				carriers []int // per member message sent, on the last call
				maxBody  int
			)
			// inner fails the first send of the chord (a broker refusing
			// it) and records what each member's message carries.
			inner := func(next errand.SendHandler) errand.SendHandler {
				return func(ctx context.Context, sigs []*errand.Signature) error {
					if len(sigs) < members {
						return next(ctx, sigs) // the callback, sent by the worker
					}
					mu.Lock()
					calls++
					call := calls
					carriers, maxBody = nil, 0
					for _, sig := range sigs {
						body, err := errand.EncodeSignature(sig)
						if err != nil {
							mu.Unlock()
							return err
						}
						maxBody = max(maxBody, len(body))
						list, _ := sig.ChordCallback.Headers[errandotel.ChordMembersHeader].([]any)
						carriers = append(carriers, len(list))
					}
					mu.Unlock()
					if call == 1 {
						return errors.New("the broker is not answering")
					}
					return next(ctx, sigs)
				}
			}
			r := newRigWith(t, errandotel.Config{MaxChordLinks: tc.max}, []errand.SendMiddleware{inner}, func(srv *errand.Server) {
				srv.Register("one", func() (int, error) { return 1, nil })
				srv.Register("count", func(xs ...int) (int, error) { return len(xs), nil })
			})
			ctx := testCtx(t)
			var sigs []*errand.Signature
			for range members {
				sigs = append(sigs, errand.NewSignature("one"))
			}
			g, _ := errand.NewGroup(sigs...)
			ch, _ := errand.NewChord(g, errand.NewSignature("count"))
			if _, err := r.srv.SendChord(ctx, ch, errand.SendConcurrency(4)); err == nil {
				t.Fatal("the first SendChord must fail: the inner send middleware refuses it")
			}
			if _, ok := ch.Callback.Headers[errandotel.ChordMembersHeader]; ok {
				t.Errorf("SendMiddleware must not change the caller's callback signature; it set %s on it", errandotel.ChordMembersHeader)
			}
			res, err := r.srv.SendChord(ctx, ch, errand.SendConcurrency(4))
			if err != nil {
				t.Fatalf("SendChord again: %v", err)
			}
			var n int
			if err := res.GetInto(ctx, &n); err != nil || n != members {
				t.Fatalf("chord callback = %d, %v; want %d", n, err, members)
			}
			r.stop(t)

			mu.Lock()
			defer mu.Unlock()
			if len(carriers) != members {
				t.Fatalf("the chord's %d members must be sent together; the inner middleware saw %d", members, len(carriers))
			}
			for i, c := range carriers {
				if c != tc.want {
					t.Fatalf("member %d's message carries %d member carriers in its callback's %s, want %d (Config.MaxChordLinks; the second send must not add to the first's)", i, c, errandotel.ChordMembersHeader, tc.want)
				}
			}
			// A carrier is about 70 bytes: N² growth would be 20 KiB per
			// member here.
			if limit := 2048 + 100*tc.want; maxBody > limit {
				t.Errorf("a member's message is %d bytes, want at most %d: the callback's header must not grow with the chord", maxBody, limit)
			}
			cbs := r.spansNamed("process count")
			if len(cbs) != 1 {
				t.Fatalf("the callback runs once: want 1 consumer span, got %d", len(cbs))
			}
			if l := len(cbs[0].Links()); l != tc.want {
				t.Errorf("the callback's consumer span links to %d members, want %d (Config.MaxChordLinks)", l, tc.want)
			}
			if d := cbs[0].DroppedLinks(); d != 0 {
				t.Errorf("the SDK dropped %d of the callback's links: the list must fit its limit", d)
			}
			want := map[trace.SpanID]bool{}
			for _, p := range r.spansNamed("send one")[members:][:tc.want] {
				want[p.SpanContext().SpanID()] = true
			}
			for _, l := range cbs[0].Links() {
				if !want[l.SpanContext.SpanID()] {
					t.Errorf("the callback links to %v, not one of the first %d members' producer spans of the second send", l.SpanContext.SpanID(), tc.want)
				}
			}
		})
	}
}

package errand_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

type ctxKey struct{}

// TestWorkerMiddlewareWrapsAttempts: worker middleware runs outermost
// first, passes context values to the task, and sees each attempt's
// recorded outcome (SUCCESS, RETRY, FAILURE) and the function's error.
func TestWorkerMiddlewareWrapsAttempts(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var events []string
	record := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	tag := func(name string) errand.Middleware {
		return func(next errand.TaskHandler) errand.TaskHandler {
			return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
				record(name + ">" + sig.Name)
				st, err := next(context.WithValue(ctx, ctxKey{}, name), sig)
				state := "nil"
				if st != nil {
					state = string(st.State)
				}
				record(fmt.Sprintf("<%s %s %s %v", name, sig.Name, state, err != nil))
				return st, err
			}
		}
	}
	e.srv.Register("seen", func(ctx context.Context) (string, error) { return fmt.Sprint(ctx.Value(ctxKey{})), nil })
	e.srv.Register("flaky", func(ctx context.Context) error {
		if ti, _ := errand.TaskInfoFrom(ctx); ti.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return errand.Permanent(errors.New("then for good"))
	})
	e.start(t, errand.WorkerConfig{Middleware: []errand.Middleware{tag("outer"), tag("inner")}})
	ctx := ctxT(t)
	r, _ := e.srv.SendTask(ctx, errand.NewSignature("seen"))
	var got string
	if err := r.GetInto(ctx, &got); err != nil || got != "inner" {
		t.Fatalf("task saw ctx value %q, %v; want the innermost middleware's (inner)", got, err)
	}
	sig := errand.NewSignature("flaky")
	sig.RetryCount = 1
	r2, _ := e.srv.SendTask(ctx, sig)
	if _, err := r2.Get(ctx); !isTaskFailure(err) {
		t.Fatalf("flaky: %v, want its failure", err)
	}
	waitFor(t, "every middleware event", func() bool { mu.Lock(); defer mu.Unlock(); return len(events) == 12 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"outer>seen", "inner>seen", "<inner seen SUCCESS false", "<outer seen SUCCESS false",
		"outer>flaky", "inner>flaky", "<inner flaky RETRY true", "<outer flaky RETRY true",
		"outer>flaky", "inner>flaky", "<inner flaky FAILURE true", "<outer flaky FAILURE true",
	}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("middleware events\n got %v\nwant %v", events, want)
	}
}

// TestSendMiddlewareHeadersReachWorkers: send middleware sees every send
// (SendTask, SendGroup, SendChain, and a worker's callbacks), and the
// headers it sets reach the task through TaskInfo.
func TestSendMiddlewareHeadersReachWorkers(t *testing.T) {
	ctx := ctxT(t)
	var mu sync.Mutex
	sent := map[string]int{}
	stamp := func(next errand.SendHandler) errand.SendHandler {
		return func(ctx context.Context, sigs []*errand.Signature) error {
			for _, sig := range sigs {
				if sig.Headers == nil {
					sig.Headers = errand.Headers{}
				}
				sig.Headers["stamp"] = "s-" + sig.Name
				mu.Lock()
				sent[sig.Name]++
				mu.Unlock()
			}
			return next(ctx, sigs)
		}
	}
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil),
		SendMiddleware: []errand.SendMiddleware{stamp}})
	if err != nil {
		t.Fatal(err)
	}
	header := func(ctx context.Context, _ ...string) (string, error) {
		ti, _ := errand.TaskInfoFrom(ctx)
		return fmt.Sprint(ti.Headers["stamp"]), nil
	}
	srv.Register("one", header)
	srv.Register("member", header)
	srv.Register("first", header)
	srv.Register("second", header)
	w := srv.NewWorker(errand.WorkerConfig{})
	w.Start()
	defer w.Shutdown(ctx)

	r, err := srv.SendTask(ctx, errand.NewSignature("one"))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := r.GetInto(ctx, &got); err != nil || got != "s-one" {
		t.Fatalf("SendTask: the task saw header %q, %v; want s-one", got, err)
	}
	g, _ := errand.NewGroup(errand.NewSignature("member"), errand.NewSignature("member"))
	rs, err := srv.SendGroup(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := r.GetInto(ctx, &got); err != nil || got != "s-member" {
			t.Fatalf("SendGroup: a member saw header %q, %v; want s-member", got, err)
		}
	}
	c, _ := errand.NewChain(errand.NewSignature("first"), errand.NewSignature("second"))
	cr, err := srv.SendChain(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.GetInto(ctx, &got); err != nil || got != "s-second" {
		t.Fatalf("SendChain: the second task (sent by the worker) saw header %q, %v; want s-second", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"one": 1, "member": 2, "first": 1, "second": 1}; fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Fatalf("send middleware saw %v, want %v", sent, want)
	}
}

// TestMiddlewareThatSkipsLeavesTaskUnrun: a middleware that does not call
// next runs nothing and records no outcome: the task stays STARTED (recorded
// before the middleware) and the worker says why.
func TestMiddlewareThatSkipsLeavesTaskUnrun(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var reported []string
	ran := make(chan struct{}, 1)
	e.srv.Register("add", func(a, b int) (int, error) { ran <- struct{}{}; return a + b, nil })
	skip := func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) { return nil, nil }
	}
	e.start(t, errand.WorkerConfig{Middleware: []errand.Middleware{skip}, ErrorHandler: func(err error) {
		mu.Lock()
		reported = append(reported, err.Error())
		mu.Unlock()
	}})
	ctx := ctxT(t)
	r, _ := e.srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	waitFor(t, "the worker to report the skipped task", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) > 0 && strings.Contains(reported[0], "did not run it")
	})
	if st, err := r.State(ctx); err != nil || st.State != errand.StateStarted {
		t.Fatalf("a skipped task's state is %v, %v; want STARTED (recorded before the middleware), no outcome", st, err)
	}
	select {
	case <-ran:
		t.Fatal("the task's function ran although the middleware skipped it")
	default:
	}
}

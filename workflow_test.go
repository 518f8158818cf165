package errand_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// echo returns its arguments as one string, so a test sees exactly which
// arguments, in which order, a workflow passed.
func echo(args ...string) string { return "(" + strings.Join(args, " ") + ")" }

func registerEcho(t *testing.T, e *env) {
	t.Helper()
	must(t, e.srv.Register("e0", func() (string, error) { return "e0", nil }))
	must(t, e.srv.Register("e1", func(a string) (string, error) { return echo(a), nil }))
	must(t, e.srv.Register("e2", func(a, b string) (string, error) { return echo(a, b), nil }))
	must(t, e.srv.Register("e3", func(a, b, c string) (string, error) { return echo(a, b, c), nil }))
	must(t, e.srv.Register("pair", func(a string) (string, int, error) { return a, len(a), nil }))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestChainStopsAtFailure(t *testing.T) {
	e := newEnv(t)
	registerEcho(t, e)
	must(t, e.srv.Register("bad", func(string) (string, error) { return "", errand.Permanent(errors.New("middle broke")) }))
	e.start(t, errand.WorkerConfig{})
	ctx := ctxT(t)
	last := errand.NewSignature("e1")
	chain, _ := errand.NewChain(errand.NewSignature("e1", "a"), errand.NewSignature("bad"), last)
	r, err := e.srv.SendChain(ctx, chain)
	must(t, err)
	if _, err := r.Get(ctx); !isTaskFailure(err) || !strings.Contains(err.Error(), "middle broke") {
		t.Fatalf("chain Get = %v, want the middle task's failure", err)
	}
	if st, _ := e.srv.Backend().GetState(ctx, last.UUID); st.State != errand.StatePending {
		t.Fatalf("task after the failure is %s, want it never run (PENDING)", st.State)
	}
}

func TestChordOfHundredFiresOnceInOrder(t *testing.T) {
	e := newEnv(t)
	const n = 100
	must(t, e.srv.Register("sq", func(i int) (int, error) { return i * i, nil }))
	calls := make(chan []int, 2)
	must(t, e.srv.Register("gather", func(tag string, xs ...int) ([]int, error) {
		calls <- xs
		return xs, nil
	}))
	e.start(t, errand.WorkerConfig{Concurrency: 8})
	ctx := ctxT(t)
	var sigs []*errand.Signature
	for i := range n {
		sigs = append(sigs, errand.NewSignature("sq", i))
	}
	g, _ := errand.NewGroup(sigs...)
	c, _ := errand.NewChord(g, errand.NewSignature("gather", "t"))
	r, err := e.srv.SendChord(ctx, c, errand.SendConcurrency(4))
	must(t, err)
	var got []int
	must(t, r.GetInto(ctx, &got))
	if len(got) != n {
		t.Fatalf("callback got %d results, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i*i {
			t.Fatalf("callback arg %d = %d, want %d: results must be in group order", i, v, i*i)
		}
	}
	if len(calls) != 1 {
		t.Fatalf("callback ran %d times, want exactly once", len(calls))
	}
}

// TestChordWithVanishedGroupFailsCallback: when a chord's group metadata is
// gone (expired, evicted), the members' worker marks the callback FAILURE
// with an error saying so, instead of retrying forever or hanging.
func TestChordWithVanishedGroupFailsCallback(t *testing.T) {
	be := memorybackend.New(&memorybackend.Options{ResultExpiry: 40 * time.Millisecond, GroupExpiry: 40 * time.Millisecond})
	br := memorybroker.New(nil)
	defer be.Close()
	defer br.Close()
	srv, _ := errand.NewServer(errand.Config{Broker: br, Backend: be})
	release := make(chan struct{})
	var ran atomic.Int32
	must(t, srv.Register("member", func(i int) (int, error) { <-release; return i, nil }))
	must(t, srv.Register("callback", func(xs ...int) error { ran.Add(1); return nil }))
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2})
	w.Start()
	defer w.Shutdown(context.Background())
	ctx := ctxT(t)
	g, _ := errand.NewGroup(errand.NewSignature("member", 1), errand.NewSignature("member", 2))
	cb := errand.NewSignature("callback")
	c, _ := errand.NewChord(g, cb)
	if _, err := srv.SendChord(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Let the group metadata expire while the members run.
	timer := time.NewTimer(100 * time.Millisecond)
	<-timer.C
	close(release)
	waitFor(t, "the callback marked FAILURE", func() bool {
		st, err := be.GetState(ctx, cb.UUID)
		return err == nil && st.State == errand.StateFailure && strings.Contains(st.Error, "gone from the backend")
	})
	if ran.Load() != 0 {
		t.Fatal("the callback of a chord whose group vanished ran")
	}
}

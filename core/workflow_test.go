package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/errand-go/errand/core"
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
	must(t, e.srv.Register("bad", func(string) (string, error) { return "", core.Permanent(errors.New("middle broke")) }))
	e.start(t, core.WorkerConfig{})
	ctx := ctxT(t)
	last := core.NewSignature("e1")
	chain, _ := core.NewChain(core.NewSignature("e1", "a"), core.NewSignature("bad"), last)
	r, err := e.srv.SendChain(ctx, chain)
	must(t, err)
	if _, err := r.Get(ctx); !core.IsTaskFailure(err) || !strings.Contains(err.Error(), "middle broke") {
		t.Fatalf("chain Get = %v, want the middle task's failure", err)
	}
	if st, _ := e.srv.Backend().GetState(ctx, last.UUID); st.State != core.StatePending {
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
	e.start(t, core.WorkerConfig{Concurrency: 8})
	ctx := ctxT(t)
	var sigs []*core.Signature
	for i := range n {
		sigs = append(sigs, core.NewSignature("sq", i))
	}
	g, _ := core.NewGroup(sigs...)
	c, _ := core.NewChord(g, core.NewSignature("gather", "t"))
	r, err := e.srv.SendChord(ctx, c, 4)
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

package core_test

import (
	"errors"
	"fmt"
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

// TestChainArgumentOrderGolden pins how results flow along a chain: each
// task's own Args first, then the previous task's results; an Immutable task
// receives only its own Args.
func TestChainArgumentOrderGolden(t *testing.T) {
	cases := []struct {
		name  string
		tasks func() []*core.Signature
		want  string
	}{
		{"results appended after own args", func() []*core.Signature {
			return []*core.Signature{core.NewSignature("e1", "a"), core.NewSignature("e2", "b"), core.NewSignature("e3", "c", "d")}
		}, "(c d (b (a)))"},
		{"immutable task ignores previous results", func() []*core.Signature {
			imm := core.NewSignature("e1", "x")
			imm.Immutable = true
			return []*core.Signature{core.NewSignature("e1", "a"), imm, core.NewSignature("e2", "y")}
		}, "(y (x))"},
		{"no-arg head", func() []*core.Signature {
			return []*core.Signature{core.NewSignature("e0"), core.NewSignature("e1")}
		}, "(e0)"},
	}
	e := newEnv(t)
	registerEcho(t, e)
	e.start(t, core.WorkerConfig{Concurrency: 4})
	ctx := ctxT(t)
	for _, c := range cases {
		chain, err := core.NewChain(c.tasks()...)
		must(t, err)
		r, err := e.srv.SendChain(ctx, chain)
		must(t, err)
		var got string
		if err := r.GetInto(ctx, &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: chain result %q, want %q", c.name, got, c.want)
		}
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

func TestGroupResultsInOrder(t *testing.T) {
	e := newEnv(t)
	registerEcho(t, e)
	e.start(t, core.WorkerConfig{Concurrency: 8})
	ctx := ctxT(t)
	var sigs []*core.Signature
	for i := range 50 {
		sigs = append(sigs, core.NewSignature("e1", fmt.Sprint(i)))
	}
	g, _ := core.NewGroup(sigs...)
	rs, err := e.srv.SendGroup(ctx, g, 4)
	must(t, err)
	for i, r := range rs {
		var got string
		must(t, r.GetInto(ctx, &got))
		if want := fmt.Sprintf("(%d)", i); got != want {
			t.Fatalf("group member %d result %q, want %q", i, got, want)
		}
	}
}

// TestChordArgumentOrderGolden: the callback receives its own args, then
// every member's results member by member in group order (a member with two
// results contributes two arguments), whatever order members finish in.
func TestChordArgumentOrderGolden(t *testing.T) {
	e := newEnv(t)
	registerEcho(t, e)
	got := make(chan string, 1)
	must(t, e.srv.Register("cb", func(prefix string, a string, an int, b string, bn int) (string, error) {
		s := fmt.Sprint(prefix, " ", a, " ", an, " ", b, " ", bn)
		got <- s
		return s, nil
	}))
	e.start(t, core.WorkerConfig{Concurrency: 4})
	ctx := ctxT(t)
	g, _ := core.NewGroup(core.NewSignature("pair", "xy"), core.NewSignature("pair", "abc"))
	c, _ := core.NewChord(g, core.NewSignature("cb", "P"))
	r, err := e.srv.SendChord(ctx, c, 2)
	must(t, err)
	var res string
	must(t, r.GetInto(ctx, &res))
	if want := "P xy 2 abc 3"; res != want {
		t.Fatalf("chord callback args %q, want %q", res, want)
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

// TestChordMemberFailureRunsOnErrorNotCallback: a member failing for good
// means the callback never runs; it is FAILURE naming the member, and its
// OnError callbacks receive that error.
func TestChordMemberFailureRunsOnErrorNotCallback(t *testing.T) {
	e := newEnv(t)
	registerEcho(t, e)
	must(t, e.srv.Register("bad", func() (string, error) { return "", errors.New("member exploded") }))
	ran := make(chan string, 4)
	must(t, e.srv.Register("cb", func(xs ...string) error { ran <- "callback"; return nil }))
	must(t, e.srv.Register("cberr", func(msg string) error { ran <- "onerror: " + msg; return nil }))
	e.start(t, core.WorkerConfig{Concurrency: 4})
	ctx := ctxT(t)
	bad := core.NewSignature("bad")
	bad.RetryCount = 1
	g, _ := core.NewGroup(core.NewSignature("e1", "a"), bad, core.NewSignature("e1", "c"))
	cb := core.NewSignature("cb")
	cb.OnError = []*core.Signature{core.NewSignature("cberr")}
	c, _ := core.NewChord(g, cb)
	r, err := e.srv.SendChord(ctx, c, 1)
	must(t, err)
	_, err = r.Get(ctx)
	if !core.IsTaskFailure(err) || !strings.Contains(err.Error(), bad.UUID) || !strings.Contains(err.Error(), "member exploded") {
		t.Fatalf("chord Get = %v, want a failure naming member %s and its error", err, bad.UUID)
	}
	msg := <-ran
	if !strings.HasPrefix(msg, "onerror: ") || !strings.Contains(msg, bad.UUID) {
		t.Fatalf("after a failed member, %q ran; want the callback's OnError with the member named", msg)
	}
	if p := fmt.Sprint(e.rec.path(cb.UUID)); p != "[PENDING FAILURE]" {
		t.Fatalf("chord callback went through %s, want [PENDING FAILURE]: it must never be received or run", p)
	}
}

package machinerye2e

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	machinery "github.com/RichardKnop/machinery/v2"
	"github.com/RichardKnop/machinery/v2/tasks"

	"github.com/errand-go/errand"
)

const (
	getTimeout = 90 * time.Second
	getSleep   = 10 * time.Millisecond
)

// errandWorker starts an errand worker on broker and backend, consuming
// queue, and stops it when the test ends.
func errandWorker(t *testing.T, broker errand.Broker, backend errand.Backend, queue string, r *runs) {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend, DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.RegisterTasks(taskFuncs(r, "errand")); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 8, Queues: map[string]int{queue: 1}, Lease: 20 * time.Second})
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("errand worker shutdown: %v", err)
		}
		srv.Close()
	})
}

// machineryWorker starts a machinery worker on srv and stops it when the
// test ends.
func machineryWorker(t *testing.T, srv *machinery.Server, r *runs) {
	t.Helper()
	if err := srv.RegisterTasks(taskFuncs(r, "machinery")); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker("machinery-worker", 4)
	errc := make(chan error, 1)
	w.LaunchAsync(errc)
	t.Cleanup(func() {
		w.Quit()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("machinery worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("machinery worker did not stop within 30s of Quit")
		}
	})
}

// scenario sends, through a machinery producer, plain tasks, an ETA task,
// a chain, a group, a chord of chordSize members and a task that fails
// twice before it succeeds, reads every result with machinery's
// AsyncResult, and returns how often each task must have run.
func scenario(t *testing.T, srv *machinery.Server, r *runs, chordSize int) map[string]int {
	t.Helper()
	want := map[string]int{}
	type check struct {
		what string
		get  func() ([]reflect.Value, error)
		want any
	}
	var checks []check
	id := unique("t")
	tag := func(s string) string {
		tg := id + "-" + s
		want[tg] = 1
		return tg
	}

	// Plain tasks.
	for i := range 20 {
		s := sig("add", tag(fmt.Sprint("plain", i)), int64(i), int64(i))
		ar, err := srv.SendTask(s)
		if err != nil {
			t.Fatalf("machinery SendTask: %v", err)
		}
		checks = append(checks, check{fmt.Sprint("plain task ", i), func() ([]reflect.Value, error) { return ar.GetWithTimeout(getTimeout, getSleep) }, int64(2 * i)})
	}

	// An ETA task, in machinery's delayed set until due.
	eta := time.Now().Add(1500 * time.Millisecond)
	etaTag := tag("eta")
	s := sig("add", etaTag, 40, 2)
	s.ETA = &eta
	etaRes, err := srv.SendTask(s)
	if err != nil {
		t.Fatalf("machinery SendTask with ETA: %v", err)
	}
	checks = append(checks, check{"ETA task", func() ([]reflect.Value, error) { return etaRes.GetWithTimeout(getTimeout, getSleep) }, int64(42)})

	// A chain: (1+2) * 3 + 10.
	chain, _ := tasks.NewChain(sig("add", tag("chain0"), 1, 2), sig("mul", tag("chain1"), 3), sig("add", tag("chain2"), 10))
	chainRes, err := srv.SendChain(chain)
	if err != nil {
		t.Fatalf("machinery SendChain: %v", err)
	}
	checks = append(checks, check{"chain", func() ([]reflect.Value, error) { return chainRes.GetWithTimeout(getTimeout, getSleep) }, int64(19)})

	// A group of 10.
	var members []*tasks.Signature
	for i := range 10 {
		members = append(members, sig("mul", tag(fmt.Sprint("group", i)), int64(i), 10))
	}
	group, _ := tasks.NewGroup(members...)
	groupRes, err := srv.SendGroup(group, 5)
	if err != nil {
		t.Fatalf("machinery SendGroup: %v", err)
	}
	for i, ar := range groupRes {
		checks = append(checks, check{fmt.Sprint("group member ", i), func() ([]reflect.Value, error) { return ar.GetWithTimeout(getTimeout, getSleep) }, int64(i * 10)})
	}

	// A chord: the sum of the squares of 1..chordSize.
	members = nil
	var sum int64
	for i := 1; i <= chordSize; i++ {
		members = append(members, sig("square", tag(fmt.Sprint("chord", i)), int64(i)))
		sum += int64(i * i)
	}
	cgroup, _ := tasks.NewGroup(members...)
	chord, _ := tasks.NewChord(cgroup, sig("sum", tag("chord-callback")))
	chordRes, err := srv.SendChord(chord, 10)
	if err != nil {
		t.Fatalf("machinery SendChord: %v", err)
	}
	checks = append(checks, check{fmt.Sprintf("chord of %d", chordSize), func() ([]reflect.Value, error) { return chordRes.GetWithTimeout(getTimeout, getSleep) }, sum})

	// Retries: fails three times, RetryCount 3: it runs 4 times.
	flakyTag := id + "-flaky"
	want[flakyTag] = 4
	fs := &tasks.Signature{Name: "flaky", Args: []tasks.Arg{{Type: "string", Value: flakyTag}}, RetryCount: 3}
	flakyRes, err := srv.SendTask(fs)
	if err != nil {
		t.Fatalf("machinery SendTask: %v", err)
	}
	checks = append(checks, check{"retried task", func() ([]reflect.Value, error) { return flakyRes.GetWithTimeout(getTimeout, getSleep) }, "ok " + flakyTag})

	for _, c := range checks {
		got, err := c.get()
		if err != nil {
			t.Errorf("%s: machinery's AsyncResult: %v", c.what, err)
			continue
		}
		if len(got) != 1 || got[0].Interface() != c.want {
			t.Errorf("%s: machinery's AsyncResult read %v, want %v", c.what, values(got), c.want)
		}
	}
	switch at, who := r.firstRun(etaTag); {
	case !at.Before(eta):
	case who == "errand":
		t.Errorf("ETA task ran on an errand worker at %s, %s before its ETA: a delayed task never runs early", at.Format(time.RFC3339Nano), eta.Sub(at))
	default:
		// machinery's SQS broker gives SQS a delay truncated to whole
		// seconds and runs what arrives: machinery's own window.
		t.Logf("ETA task ran on a %s worker %s before its ETA (machinery's own timing)", who, eta.Sub(at))
	}
	return want
}

func values(vs []reflect.Value) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v.Interface()
	}
	return out
}

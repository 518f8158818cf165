package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// workerSnooze: a task that snoozes (errand.Snooze) runs again after the
// delay without spending a retry — with RetryCount 1, two snoozes and a
// failure still leave it the run that succeeds —, each attempt sees its
// Snoozes and raised RetryCount in TaskInfo, a snoozed task waits in RETRY
// with ErrorKind "snoozed" as the backend stores it, and a task snoozing
// for ever fails once over WorkerConfig.MaxSnoozes, with
// ErrSnoozesExhausted.
func workerSnooze(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	d := c.tm.Delay / 2
	var runs runLog
	var mu sync.Mutex
	var seen []string
	c.register("snoozer", func(ctx context.Context) (string, error) {
		runs.add()
		ti, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%d/%d/%d", ti.Attempt, ti.Snoozes, ti.RetryCount))
		mu.Unlock()
		switch ti.Attempt {
		case 1, 2:
			return "", fmt.Errorf("wrapped: %w", errand.Snooze(d))
		case 3:
			return "", errors.New("transient")
		}
		return "woke", nil
	})
	var forever runLog
	c.register("forever", func() error { forever.add(); return errand.Snooze(0) })
	napping := make(chan struct{}, 1)
	c.register("nap", func() error {
		select {
		case napping <- struct{}{}:
		default: // run again (a broker delivering early): never block
		}
		return errand.Snooze(time.Hour)
	})
	c.start(errand.WorkerConfig{MaxSnoozes: 2, RetryPolicy: errand.Fixed(0)})

	sig := errand.NewSignature("snoozer")
	sig.RetryCount = 1
	nap := c.send(errand.NewSignature("nap"))
	var out string
	if err := c.send(sig).GetInto(c.ctx, &out); err != nil || out != "woke" {
		t.Fatalf("snooze promise broken: a task with RetryCount 1 that snoozed twice and failed once ended %q, %v; want its fourth run's result (a snooze spends no retry)", out, err)
	}
	for i, g := range runs.gaps()[:2] {
		if g < d {
			t.Errorf("snooze promise broken: the run after snooze %d came %v after the previous run, before the %v it snoozed for", i+1, g, d)
		}
	}
	mu.Lock()
	got := strings.Join(seen, " ")
	mu.Unlock()
	if want := "1/0/1 2/1/2 3/2/3 4/2/3"; got != want {
		t.Errorf("snooze promise broken: TaskInfo Attempt/Snoozes/RetryCount of the runs were %s, want %s (each snooze is an attempt and raises the retry bound)", got, want)
	}
	want := []errand.State{errand.StatePending}
	for range 3 {
		want = append(want, errand.StateReceived, errand.StateStarted, errand.StateRetry)
	}
	c.pathIs(sig.UUID, append(want, errand.StateReceived, errand.StateStarted, errand.StateSuccess)...)

	// While it waits: RETRY, ErrorKind snoozed, as stored.
	select {
	case <-napping:
	case <-c.ctx.Done():
		t.Fatal("snooze promise broken: the task that snoozes for an hour never ran")
	}
	var st *errand.TaskState
	for {
		var err error
		if st, err = nap.State(c.ctx); err != nil {
			t.Fatalf("snooze promise broken: state of a snoozed task: %v", err)
		}
		if st.State == errand.StateRetry || st.State.Terminal() {
			break
		}
		select {
		case <-c.ctx.Done():
			t.Fatalf("snooze promise broken: a task that snoozed for an hour is still %s, want RETRY", st.State)
		case <-time.After(c.tm.Prompt / 100): // polling the backend for the worker's next write
		}
	}
	if st.State != errand.StateRetry || st.ErrorKind != string(errand.KindSnoozed) || !strings.Contains(st.Error, "1h0m0s") || st.Attempt != 2 {
		t.Errorf("snooze promise broken: a task that snoozed for an hour is stored %s with ErrorKind %q, Error %q, Attempt %d; want RETRY, ErrorKind snoozed, an Error naming 1h0m0s, Attempt 2", st.State, st.ErrorKind, st.Error, st.Attempt)
	}

	// Bounded: MaxSnoozes 2, so the third snooze fails the task.
	_, err := c.send(errand.NewSignature("forever")).Get(c.ctx)
	var te *errand.TaskError
	if !errors.As(err, &te) || te.Kind != errand.KindSnoozesExhausted || !errors.Is(err, errand.ErrSnoozesExhausted) {
		t.Fatalf("snooze promise broken: a task snoozing for ever under MaxSnoozes 2 ended with %v; want a FAILURE of kind snoozes_exhausted satisfying ErrSnoozesExhausted (a task must not snooze for ever unnoticed)", err)
	}
	if n := len(forever.gaps()) + 1; n != 3 {
		t.Errorf("snooze promise broken: a task snoozing for ever under MaxSnoozes 2 ran %d times, want 3", n)
	}
}

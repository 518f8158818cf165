package errand_test

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

// TestSnoozeSpendsNoRetry: a task with RetryCount 1 that snoozes twice,
// then fails once, then succeeds, succeeds: its snoozes spent no retry.
// Each attempt sees its Attempt, Snoozes and raised RetryCount in
// TaskInfo, and the states go through RETRY for each snooze.
func TestSnoozeSpendsNoRetry(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	var mu sync.Mutex
	var seen []string
	e.srv.Register("snoozer", func(ctx context.Context) (string, error) {
		ti, _ := errand.TaskInfoFrom(ctx)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%d/%d/%d", ti.Attempt, ti.Snoozes, ti.RetryCount))
		mu.Unlock()
		switch ti.Attempt {
		case 1, 2:
			return "", fmt.Errorf("wrapped: %w", errand.Snooze(time.Millisecond))
		case 3:
			return "", errors.New("transient")
		}
		return "done", nil
	})
	e.start(t, errand.WorkerConfig{})
	sig := errand.NewSignature("snoozer")
	sig.RetryCount = 1
	r, err := e.srv.SendTask(ctxT(t), sig)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := r.GetInto(ctxT(t), &out); err != nil || out != "done" {
		t.Fatalf("snooze promise broken: a task with RetryCount 1 that snoozed twice and failed once ended %q, %v; want done (a snooze spends no retry)", out, err)
	}
	mu.Lock()
	got := strings.Join(seen, " ")
	mu.Unlock()
	// Attempt/Snoozes/RetryCount as each attempt saw them.
	if want := "1/0/1 2/1/2 3/2/3 4/2/3"; got != want {
		t.Errorf("snooze promise broken: TaskInfo Attempt/Snoozes/RetryCount of the attempts %s, want %s", got, want)
	}
	want := []errand.State{errand.StatePending}
	for range 3 {
		want = append(want, errand.StateReceived, errand.StateStarted, errand.StateRetry)
	}
	want = append(want, errand.StateReceived, errand.StateStarted, errand.StateSuccess)
	if p := e.rec.path(sig.UUID); fmt.Sprint(p) != fmt.Sprint(want) {
		t.Errorf("snooze states: %v, want %v", p, want)
	}
}

// TestSnoozeWaitsInRetry: while a snoozed task waits, its state is RETRY
// with ErrorKind "snoozed" and an Error naming the delay, and it does not
// run before the delay.
func TestSnoozeWaitsInRetry(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	runs := make(chan int, 4)
	e.srv.Register("nap", func(ctx context.Context) error {
		ti, _ := errand.TaskInfoFrom(ctx)
		runs <- ti.Attempt
		return errand.Snooze(time.Hour)
	})
	e.start(t, errand.WorkerConfig{})
	r, err := e.srv.SendTask(ctxT(t), errand.NewSignature("nap"))
	if err != nil {
		t.Fatal(err)
	}
	<-runs
	var st *errand.TaskState
	var err2 error
	waitFor(t, "the snoozed task's RETRY", func() bool {
		st, err2 = r.State(ctxT(t))
		return err2 != nil || st.State == errand.StateRetry
	})
	if err = err2; err != nil || st.State != errand.StateRetry || st.ErrorKind != string(errand.KindSnoozed) || !strings.Contains(st.Error, "1h0m0s") || st.Attempt != 2 {
		t.Fatalf("snooze promise broken: a snoozed task is %+v (%v); want RETRY, ErrorKind snoozed, an Error naming 1h0m0s, Attempt 2", st, err)
	}
	select {
	case a := <-runs:
		t.Fatalf("snooze promise broken: attempt %d ran before the hour the task snoozed for", a)
	default:
	}
}

// TestSnoozeBound: a task that snoozes for ever fails once it snoozed
// MaxSnoozes times, with ErrSnoozesExhausted and its kind; a negative
// MaxSnoozes allows none.
func TestSnoozeBound(t *testing.T) {
	for _, tc := range []struct{ max, runs int }{{2, 3}, {-1, 1}} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			checkNoLeak(t)
			e := newEnv(t)
			var mu sync.Mutex
			n := 0
			e.srv.Register("forever", func() error {
				mu.Lock()
				n++
				mu.Unlock()
				return errand.Snooze(0)
			})
			e.start(t, errand.WorkerConfig{MaxSnoozes: tc.max})
			r, err := e.srv.SendTask(ctxT(t), errand.NewSignature("forever"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Get(ctxT(t))
			var te *errand.TaskError
			if !errors.As(err, &te) || te.Kind != errand.KindSnoozesExhausted || !errors.Is(err, errand.ErrSnoozesExhausted) {
				t.Fatalf("snooze bound promise broken: a task snoozing for ever with MaxSnoozes %d ended with %v; want a FAILURE of kind snoozes_exhausted satisfying ErrSnoozesExhausted", tc.max, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if n != tc.runs {
				t.Errorf("snooze bound promise broken: MaxSnoozes %d ran the task %d times, want %d", tc.max, n, tc.runs)
			}
		})
	}
}

// TestSnoozeKeepsDeadline: a snooze past the signature's Deadline fails
// the task instead of sending it again.
func TestSnoozeKeepsDeadline(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	e.srv.Register("late", func() error { return errand.Snooze(time.Hour) })
	e.start(t, errand.WorkerConfig{})
	sig := errand.NewSignature("late")
	dl := time.Now().Add(time.Minute)
	sig.Deadline = &dl
	r, err := e.srv.SendTask(ctxT(t), sig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctxT(t)); !isTaskFailure(err) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("snooze promise broken: a snooze of an hour with a deadline in a minute ended %v; want a FAILURE naming the deadline", err)
	}
}

package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// stateProgress: a state's Progress (errand.SetProgress's JSON) is stored
// and read back byte for byte, whatever the state, a state written without
// one reads back without one, and a backend that starts attempts
// (driver.Starter) returns it in the previous state it answers with.
func stateProgress(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	id := name(t, "task")
	created := time.Now().UTC().Truncate(time.Millisecond)
	running, _ := json.Marshal(map[string]any{"done": 3, "of": 10, "note": "<é> & \u2028", "steps": []any{"fetch", 1.5, nil}})
	final := []byte(`[1,{"a":"b"},"x"]`)
	check := func(when string, want []byte) {
		t.Helper()
		got, err := c.b.GetState(c.ctx, id)
		if err != nil {
			t.Fatalf("GetState %s: %v", when, err)
		}
		if !bytes.Equal(got.Progress, want) {
			t.Fatalf("progress promise broken: %s, Progress read back as %q, want %q byte for byte (the producer decodes what the task reported)", when, got.Progress, want)
		}
	}
	st := &errand.TaskState{TaskUUID: id, TaskName: startName, State: errand.StateStarted, Attempt: 1, CreatedAt: created, StartedAt: created, Progress: running}
	c.set(st)
	check("after a STARTED with progress", running)
	st = st.Copy()
	st.State, st.Error, st.ErrorKind, st.Attempt, st.Progress = errand.StateRetry, "snoozed", "snoozed", 2, final
	c.set(st)
	check("after a RETRY carrying the last progress", final)
	if s, ok := c.b.(driver.Starter); ok {
		res := s.Start(c.ctx, []driver.StartRequest{startRequest(id, startRow{name: startName, attempt: 2}, created)})
		if len(res) != 1 || res[0].Err != nil || !res[0].Written || res[0].Prev == nil {
			t.Fatalf("Start of the retry: %+v; want written over RETRY, with the previous state", res)
		}
		if !bytes.Equal(res[0].Prev.Progress, final) {
			t.Errorf("progress promise broken: Start's previous state has Progress %q, want %q byte for byte (driver.Starter answers with the state as stored)", res[0].Prev.Progress, final)
		}
	} else {
		st = st.Copy()
		st.State, st.Error, st.ErrorKind, st.Progress = errand.StateStarted, "", "", nil
		c.set(st)
	}
	check("after a STARTED without progress", nil)
}

// workerProgress: a producer reads the progress a running task reports
// (errand.SetProgress, AsyncResult.Progress), the final state keeps the
// last value set, an oversize value is refused with nothing written, and
// a tight loop of SetProgress calls costs a bounded number of writes
// (WorkerConfig.ProgressEvery).
func workerProgress(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	type step struct{ Done, Of int }
	release := make(chan struct{})
	refused := make(chan error, 1)
	c.register("long", func(ctx context.Context) error {
		if err := errand.SetProgress(ctx, step{1, 2}); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		refused <- errand.SetProgress(ctx, strings.Repeat("x", errand.DefaultMaxProgressSize))
		return errand.SetProgress(ctx, step{2, 2})
	})
	const n = 10000
	var took time.Duration
	c.register("tight", func(ctx context.Context) error {
		start := time.Now()
		for i := range n {
			if err := errand.SetProgress(ctx, i+1); err != nil {
				return err
			}
		}
		took = time.Since(start)
		return nil
	})
	every := c.tm.Delay
	c.start(errand.WorkerConfig{ProgressEvery: every})

	long := c.send(errand.NewSignature("long"))
	var got step
	// The first value is written at once: a generous bound against a hang.
	giveUp := time.After(10 * c.tm.Prompt)
	for {
		ok, err := long.Progress(c.ctx, &got)
		if err != nil && !errors.Is(err, errand.ErrTaskNotFound) {
			t.Fatalf("Progress of a running task: %v", err)
		}
		if ok {
			break
		}
		select {
		case <-giveUp:
			close(release)
			t.Fatalf("progress promise broken: the producer never read the progress the running task reported (waited %v)", 10*c.tm.Prompt)
		case <-time.After(c.tm.Prompt / 100): // polling the backend for the worker's write
		}
	}
	close(release)
	if got != (step{1, 2}) {
		t.Errorf("progress promise broken: the producer read %+v while the task ran, want {1 2}", got)
	}
	if _, err := long.Get(c.ctx); err != nil {
		t.Fatalf("the progress task: %v", err)
	}
	if err := <-refused; !errors.Is(err, errand.ErrPayloadTooLarge) {
		t.Errorf("progress promise broken: a value over MaxProgressSize gave %v, want an error satisfying ErrPayloadTooLarge", err)
	}
	if ok, err := long.Progress(c.ctx, &got); err != nil || !ok || got != (step{2, 2}) {
		t.Errorf("progress promise broken: the SUCCESS state's progress read back as %+v (%v, %v), want the last value set, {2 2}", got, ok, err)
	}

	sig := errand.NewSignature("tight")
	tight := c.send(sig)
	if _, err := tight.Get(c.ctx); err != nil {
		t.Fatalf("the tight-loop task: %v", err)
	}
	var last int
	if ok, err := tight.Progress(c.ctx, &last); err != nil || !ok || last != n {
		t.Errorf("progress promise broken: after %d SetProgress calls the final state's progress is %d (%v, %v), want %d", n, last, ok, err, n)
	}
	if w, bound := c.rec.progressWrites(sig.UUID), 2+int(took/every); w > bound {
		t.Errorf("progress rate limit broken: %d SetProgress calls in %v made %d progress writes, want at most %d (one at once, then one per ProgressEvery %v)", n, took, w, bound, every)
	}
}

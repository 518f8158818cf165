package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// The operator's capabilities end to end through errand's worker: what fails
// for good ends in the archive and can be requeued, a paused queue is not
// fetched, a running worker is listed with what it runs.

// archivedTask polls the Server's archive of c.queue for id until it is
// there or the wait ends.
func (c *wcase) archivedTask(id, promise string) errand.QueuedTask {
	c.t.Helper()
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for {
		ti, err := c.srv.ArchivedTask(c.ctx, c.queue, id)
		if err == nil {
			return ti
		}
		if !errors.Is(err, errand.ErrNotArchived) {
			c.t.Fatalf("ArchivedTask(%s): %v", id, err)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s promise broken: %s is not in the archive of its queue %v after it failed for good: %v", promise, id, c.tm.Prompt*5, err)
		}
		sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
	}
}

// archiveFailedTask: a task whose retries run out ends FAILURE and in the
// archive with its reason, attempts and last error; Server.Requeue runs it
// again, once, and takes it out of the archive.
func archiveFailedTask(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	if !c.caps.Archive {
		if err := c.srv.Requeue(c.ctx, c.queue, runID+"-x"); !isUnsupported(err) {
			t.Errorf("Server.Requeue on a broker without an archive returned %v, want errors.ErrUnsupported", err)
		}
		t.Logf("broker does not declare Archive: tasks that fail for good are rejected (dead-lettered), not archived")
		return
	}
	const promise = "archive (a task that fails for good is kept with its reason, attempts and last error, and runs again once requeued)"
	var runs atomic.Int32
	c.register("flaky", func() (string, error) {
		if n := runs.Add(1); n <= 2 {
			return "", fmt.Errorf("broken %s, run %d", runID, n)
		}
		return "fixed", nil
	})
	c.start(errand.WorkerConfig{RetryPolicy: errand.Fixed(0)})
	sig := errand.NewSignature("flaky")
	sig.RetryCount = 1
	r := c.send(sig)
	c.failure(r, promise)
	ti := c.archivedTask(sig.UUID, promise)
	lastErr := fmt.Sprintf("broken %s, run 2", runID)
	switch a := ti.Archive; {
	case a == nil:
		t.Fatalf("%s promise broken: ArchivedTask(%s) has no archive entry", promise, sig.UUID)
	case a.Reason == "" || a.Attempts != 2 || !strings.Contains(a.Error, lastErr):
		t.Errorf("%s promise broken: archived with Reason %q, Attempts %d, Error %q; want a reason, 2 attempts (RetryCount 1) and the last error %q", promise, a.Reason, a.Attempts, a.Error, lastErr)
	case a.At.After(time.Now().Add(stamp)) || time.Since(a.At) > c.tm.Prompt*10+stamp:
		t.Errorf("%s promise broken: archived At %v, want about now (%v)", promise, a.At, time.Now())
	}
	if ti.Signature == nil || ti.Signature.UUID != sig.UUID || ti.TaskName() != "flaky" {
		t.Errorf("%s promise broken: the archived message decodes to %+v (%s), want task flaky %s", promise, ti.Signature, ti.DecodeError, sig.UUID)
	}
	if st, err := r.State(c.ctx); err != nil || st.State != errand.StateFailure {
		t.Errorf("%s promise broken: the archived task's state is %+v, %v; want FAILURE", promise, st, err)
	}
	page, err := c.srv.List(c.ctx, c.queue, errand.ListArchived, 0, 10)
	if err != nil || !slices.ContainsFunc(page, func(q errand.QueuedTask) bool { return q.ID == sig.UUID }) {
		t.Errorf("%s promise broken: Server.List(archived) = %d tasks, %v; want it to hold %s", promise, len(page), err, sig.UUID)
	}

	if err := c.srv.Requeue(c.ctx, c.queue, sig.UUID); err != nil {
		t.Fatalf("%s promise broken: Requeue(%s): %v", promise, sig.UUID, err)
	}
	var out string
	if err := r.GetInto(c.ctx, &out); err != nil || out != "fixed" {
		t.Fatalf("%s promise broken: the requeued task ended %q, %v; want it to run again and succeed", promise, out, err)
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("%s promise broken: the task ran %d times, want 3 (twice, then once requeued)", promise, n)
	}
	c.pathIs(sig.UUID, errand.StatePending,
		errand.StateReceived, errand.StateStarted, errand.StateRetry,
		errand.StateReceived, errand.StateStarted, errand.StateFailure,
		errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateSuccess)
	if _, err := c.srv.ArchivedTask(c.ctx, c.queue, sig.UUID); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("%s promise broken: after its requeue, ArchivedTask(%s) returned %v, want ErrNotArchived", promise, sig.UUID, err)
	}
	if err := c.srv.Requeue(c.ctx, c.queue, sig.UUID); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("%s promise broken: a second Requeue of %s returned %v, want an error satisfying errors.Is(err, errand.ErrNotArchived)", promise, sig.UUID, err)
	}
	if err := c.srv.Requeue(c.ctx, c.queue, runID+"-never-archived"); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("%s promise broken: Requeue of an ID never archived returned %v, want ErrNotArchived", promise, err)
	}
}

// archiveUndecodable: bytes that do not decode end in the archive with
// their body, a reason and an error, and the worker goes on.
func archiveUndecodable(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	if !c.caps.Archive {
		t.Logf("broker does not declare Archive: undecodable messages are rejected (BadMessage/WorkerGoesOn checks the dead letters)")
		return
	}
	const promise = "archive (bytes that do not decode are kept with their body and why)"
	c.register("ok", func() (string, error) { return "alive", nil })
	c.start(errand.WorkerConfig{})
	garbage := errand.Message{ID: fmt.Sprintf("%s-undecodable-%d", runID, seq.Add(1)), Queue: c.queue, Body: []byte(`{"UUID": 12, broken ` + runID)}
	if err := c.broker.Publish(c.ctx, garbage); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := c.send(errand.NewSignature("ok")).GetInto(c.ctx, &s); err != nil || s != "alive" {
		t.Fatalf("%s promise broken: the worker did not go on after an undecodable message: %q, %v", promise, s, err)
	}
	ti := c.archivedTask(garbage.ID, promise)
	if !bytes.Equal(ti.Message.Body, garbage.Body) {
		t.Errorf("%s promise broken: archived with body %q, want the bytes as they were on the queue %q", promise, ti.Message.Body, garbage.Body)
	}
	if a := ti.Archive; a == nil || a.Reason == "" || a.Error == "" {
		t.Errorf("%s promise broken: archived as %+v; want a reason and an error", promise, a)
	}
	if ti.Signature != nil || ti.DecodeError == "" {
		t.Errorf("%s promise broken: ArchivedTask shows signature %+v, decode error %q; want none and why it does not decode", promise, ti.Signature, ti.DecodeError)
	}
}

// pauseWorker: a task sent while its queue is paused waits, pending, until
// Resume.
func pauseWorker(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	if !c.caps.Pause {
		if err := c.srv.Pause(c.ctx, c.queue); !isUnsupported(err) {
			t.Errorf("Server.Pause on a broker without the capability returned %v, want errors.ErrUnsupported", err)
		}
		t.Logf("broker does not declare Pause")
		return
	}
	const promise = "pause (workers stop fetching a paused queue within PausePoll, and go on after Resume)"
	poll := c.tm.Prompt / 10
	ran := make(chan string, 8)
	c.register("ok", func(tag string) (string, error) { ran <- tag; return tag, nil })
	c.start(errand.WorkerConfig{PausePoll: poll})
	// The worker is fetching (its fetch blocks in the driver) before the pause.
	var out string
	if err := c.send(errand.NewSignature("ok", "before")).GetInto(c.ctx, &out); err != nil || out != "before" {
		t.Fatalf("the task before the pause ended %q, %v", out, err)
	}
	<-ran
	if err := c.srv.Pause(c.ctx, c.queue); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	// The worker notices within a poll: time passing is the event.
	sleepUntil(c.ctx, time.Now().Add(poll*3))
	r := c.send(errand.NewSignature("ok", "paused"))
	sleepUntil(c.ctx, time.Now().Add(poll*3))
	select {
	case tag := <-ran:
		t.Fatalf("%s promise broken: task %q ran while its queue was paused (PausePoll %v, waited %v after the pause)", promise, tag, poll, poll*6)
	default:
	}
	if st, err := r.State(c.ctx); err != nil || st.State != errand.StatePending {
		t.Errorf("%s promise broken: a task sent to a paused queue is %+v, %v after %v; want PENDING", promise, st, err, poll*3)
	}
	if err := c.srv.Resume(c.ctx, c.queue); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := r.GetInto(c.ctx, &out); err != nil || out != "paused" {
		t.Fatalf("%s promise broken: after Resume the task ended %q, %v; want it to run", promise, out, err)
	}
}

// heartbeatWorker: a running worker is in Server.Workers with its queue,
// concurrency and running task; after Shutdown it is gone.
func heartbeatWorker(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	if !c.caps.Heartbeat {
		if _, err := c.srv.Workers(c.ctx); !isUnsupported(err) {
			t.Errorf("Server.Workers on a broker without heartbeats returned %v, want errors.ErrUnsupported", err)
		}
		t.Logf("broker does not declare Heartbeat")
		return
	}
	const promise = "heartbeats (a live worker is listed with what it runs; one shut down is not)"
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	c.register("block", func(ctx context.Context) (string, error) {
		started <- struct{}{}
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	w := c.srv.NewWorker(errand.WorkerConfig{Concurrency: 3, Heartbeat: c.tm.Prompt / 10, Lease: c.lease, ErrorBackoff: c.tm.Prompt / 10})
	w.Start()
	var stopped atomic.Bool
	c.t.Cleanup(func() {
		free()
		if !stopped.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), c.tm.Prompt*10)
			defer cancel()
			w.Shutdown(ctx)
		}
	})
	sig := errand.NewSignature("block")
	r := c.send(sig)
	select {
	case <-started:
	case <-c.ctx.Done():
		t.Fatalf("delivery promise broken: the task never started")
	}
	find := func() (errand.WorkerInfo, bool) {
		t.Helper()
		ws, err := c.srv.Workers(c.ctx)
		if err != nil {
			t.Fatalf("Workers: %v", err)
		}
		for _, wi := range ws {
			if wi.ID == w.ID() {
				return wi, true
			}
		}
		return errand.WorkerInfo{}, false
	}
	deadline := time.Now().Add(c.tm.Prompt * 5)
	for {
		wi, ok := find()
		running := slices.ContainsFunc(wi.Running, func(rt errand.RunningTask) bool { return rt.UUID == sig.UUID })
		if ok && running && slices.Contains(wi.Queues, c.queue) && wi.Concurrency == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s promise broken: %v after its task started, Server.Workers has worker %s as %+v (listed: %v); want it with queue %s, concurrency 3 and task %s running", promise, c.tm.Prompt*5, w.ID(), wi, ok, c.queue, sig.UUID)
		}
		sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
	}
	free()
	if _, err := r.Get(c.ctx); err != nil {
		t.Fatalf("the task ended %v", err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.tm.Prompt*10)
	defer cancel()
	stopped.Store(true)
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if wi, ok := find(); ok {
		t.Errorf("%s promise broken: after Shutdown returned, Server.Workers still lists worker %s (%+v); a clean shutdown removes its heartbeat", promise, w.ID(), wi)
	}
}

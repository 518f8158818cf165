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
	"github.com/errand-go/errand/driver"
)

// Unique tasks: the broker's uniqueness locks (driver.Uniquer), checked on
// the driver, and errand's unique sends end to end. Each case logs and
// checks nothing else when the harness does not declare Unique
// (Capabilities checks the declaration against the driver).

func (c *bcase) uniquer() driver.Uniquer {
	c.t.Helper()
	u, ok := c.drv.(driver.Uniquer)
	if !ok {
		c.t.Fatalf("harness declares Unique but %T is not a driver.Uniquer", c.drv)
	}
	return u
}

// uniqueLock: a free key is taken; a held key names its holder to anyone
// else; Unlock by anyone but the holder changes nothing; Unlock by the
// holder frees it; and a held key is free once its ttl has run out, never
// before.
func uniqueLock(t testing.TB, h BrokerHarness) {
	if !h.Caps.Unique {
		t.Logf("broker does not declare Unique; errand refuses signatures with a UniqueKey on it")
		return
	}
	const promise = "unique lock (one holder per key until it unlocks or its ttl runs out)"
	c := newBCase(t, h)
	u := c.uniquer()
	key := name(t, "key")
	a, b, x := runID+"-task-a", runID+"-task-b", runID+"-task-x"
	lock := func(id string, ttl time.Duration) string {
		t.Helper()
		holder, err := u.Lock(c.ctx, key, id, ttl)
		if err != nil {
			t.Fatalf("Lock(%s, %s, %v): %v", key, id, ttl, err)
		}
		return holder
	}
	unlock := func(id string) {
		t.Helper()
		if err := u.Unlock(c.ctx, key, id); err != nil {
			t.Fatalf("Unlock(%s, %s): %v", key, id, err)
		}
	}
	if got := lock(a, time.Minute); got != a {
		t.Fatalf("%s promise broken: Lock of a free key by %s returned holder %q, want %s (taken)", promise, a, got, a)
	}
	if got := lock(b, time.Minute); got != a {
		t.Fatalf("%s promise broken: Lock by %s of a key %s holds returned %q, want the holder %s", promise, b, a, got, a)
	}
	if got := lock(a, time.Minute); got != a {
		t.Errorf("%s promise broken: Lock by the holder %s again returned %q, want %s", promise, a, got, a)
	}
	unlock(b)
	if got := lock(x, time.Minute); got != a {
		t.Fatalf("%s promise broken: after Unlock by %s, which does not hold the key, Lock by %s returned %q, want the holder %s (an Unlock by anyone but the holder changes nothing)", promise, b, x, got, a)
	}
	unlock(a)
	ttl := c.tm.Lease * 2
	locked := time.Now()
	if got := lock(b, ttl); got != b {
		t.Fatalf("%s promise broken: after Unlock by the holder %s, Lock by %s returned %q, want %s (the key is free)", promise, a, b, got, b)
	}
	if err := sleepUntil(c.ctx, locked.Add(ttl/2)); err != nil {
		t.Fatal(err)
	}
	if got := lock(x, time.Minute); got != b && time.Since(locked) < ttl {
		t.Fatalf("%s promise broken: %v after %s took the key for %v, Lock by %s returned %q, want the holder %s (freed before its ttl)", promise, time.Since(locked).Round(time.Millisecond), b, ttl, x, got, b)
	}
	by := locked.Add(ttl + c.tm.Prompt)
	for {
		got := lock(x, time.Minute)
		if got == x {
			break
		}
		if time.Now().After(by) {
			t.Fatalf("%s promise broken: %s took the key with a ttl of %v and never unlocked it; %v later Lock by %s still returns holder %q (a lock whose worker died must go with its ttl)", promise, b, ttl, time.Since(locked).Round(time.Millisecond), x, got)
		}
		if err := sleepUntil(c.ctx, time.Now().Add(ttl/10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.Unlock(c.ctx, name(t, "never-locked"), a); err != nil {
		t.Errorf("%s promise broken: Unlock of a key nobody holds returned %v, want nil", promise, err)
	}
}

// uniqueConcurrent: 50 callers lock one free key at once; exactly one
// takes it and every other is told that one's ID.
func uniqueConcurrent(t testing.TB, h BrokerHarness) {
	if !h.Caps.Unique {
		t.Logf("broker does not declare Unique")
		return
	}
	const promise = "unique lock (exactly one of many concurrent callers takes a free key)"
	c := newBCase(t, h)
	u := c.uniquer()
	key := name(t, "key")
	const n = 50
	holders := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			holders[i], errs[i] = u.Lock(c.ctx, key, fmt.Sprintf("%s-caller-%02d", runID, i), time.Minute)
		})
	}
	close(start)
	wg.Wait()
	var winners []string
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Lock by caller %d: %v", i, errs[i])
		}
		if holders[i] == fmt.Sprintf("%s-caller-%02d", runID, i) {
			winners = append(winners, holders[i])
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%s promise broken: %d concurrent callers locked one free key and %d of them took it (%v); want exactly 1", promise, n, len(winners), winners)
	}
	for i, hd := range holders {
		if hd != winners[0] {
			t.Errorf("%s promise broken: caller %d was told holder %q, but %s took the key", promise, i, hd, winners[0])
		}
	}
}

// ---- end to end ----

// uniqueSig is a signature of the case's unique task in mode.
func (c *wcase) uniqueSig(key, mode string) *errand.Signature {
	sig := errand.NewSignature("unique", mode)
	sig.UniqueKey, sig.UniqueFor = key, time.Minute
	return sig
}

// duplicate sends a task of key and checks the send is refused naming
// holder, and that nothing of the refused task was recorded.
func (c *wcase) duplicate(key, holder, when, promise string) {
	c.t.Helper()
	sig := c.uniqueSig(key, "ok")
	_, err := c.srv.SendTask(c.ctx, sig)
	var de *errand.DuplicateError
	switch {
	case err == nil:
		c.t.Fatalf("%s promise broken: a second task with unique key %q was sent %s (task %s holds the key); want an error satisfying errors.Is(err, errand.ErrDuplicate)", promise, key, when, holder)
	case !errors.Is(err, errand.ErrDuplicate) || !errors.As(err, &de):
		c.t.Fatalf("%s promise broken: a second send of unique key %q %s returned %v, want a *errand.DuplicateError satisfying errors.Is(err, errand.ErrDuplicate)", promise, key, when, err)
	case de.ID != holder || de.Key != key || !strings.Contains(err.Error(), holder):
		c.t.Errorf("%s promise broken: the duplicate send %s was refused with %+v (%q), want it to name the key %q and the holder %s", promise, when, de, err, key, holder)
	}
	if _, err := c.srv.Backend().GetState(c.ctx, sig.UUID); !errors.Is(err, errand.ErrTaskNotFound) {
		c.t.Errorf("%s promise broken: the refused task %s has a state (%v); a refused send records nothing", promise, sig.UUID, err)
	}
}

// sendUnique sends sig, retrying while its key is still held, for up to
// 5×Prompt: the worker frees the key just after it records the end.
func (c *wcase) sendUnique(sig *errand.Signature, after, promise string) *errand.AsyncResult {
	c.t.Helper()
	by := time.Now().Add(c.tm.Prompt * 5)
	for {
		r, err := c.srv.SendTask(c.ctx, sig)
		if err == nil {
			return r
		}
		if !errors.Is(err, errand.ErrDuplicate) || time.Now().After(by) {
			c.t.Fatalf("%s promise broken: %v after %s, a task with its unique key %q still cannot be sent: %v", promise, c.tm.Prompt*5, after, sig.UniqueKey, err)
		}
		sleepUntil(c.ctx, time.Now().Add(c.tm.Prompt/50))
	}
}

// uniqueReleasedOnFinish: a second task with a held key is refused with
// the holder's ID while the holder is pending, running, or waiting for a
// retry; once the holder succeeds, or fails for good, the key can be sent
// again.
func uniqueReleasedOnFinish(t testing.TB, p workerPair) {
	c := newWCase(t, p)
	key := name(t, "key")
	if !c.caps.Unique {
		_, err := c.srv.SendTask(c.ctx, c.uniqueSig(key, "ok"))
		if !isUnsupported(err) {
			t.Errorf("SendTask with a UniqueKey on a broker without unique locks returned %v, want an error satisfying errors.Is(err, errors.ErrUnsupported) (never silently not unique)", err)
		}
		t.Logf("broker does not declare Unique")
		return
	}
	const promise = "unique tasks (a key is held from the send until the task ends for good)"
	started := make(chan string, 8)
	gate, gate2 := make(chan struct{}), make(chan struct{})
	c.register("unique", func(ctx context.Context, mode string) (string, error) {
		info, _ := errand.TaskInfoFrom(ctx)
		started <- fmt.Sprintf("%s %d", mode, info.Attempt)
		switch {
		case mode == "block":
			<-gate
		case mode == "fail":
			return "", errand.Permanent(fmt.Errorf("failed on purpose (%s)", runID))
		case mode == "retry" && info.Attempt == 1:
			return "", errand.RetryLater(0, fmt.Errorf("retried on purpose (%s)", runID))
		case mode == "retry":
			<-gate2
		}
		return mode, nil
	})
	first := c.uniqueSig(key, "block")
	r1 := c.send(first)
	c.duplicate(key, first.UUID, "while the holder is PENDING", promise)
	c.start(errand.WorkerConfig{})
	if got := c.recv(started, "the unique task"); got != "block 1" {
		t.Fatalf("the unique task ran as %q, want %q", got, "block 1")
	}
	c.duplicate(key, first.UUID, "while the holder runs", promise)
	close(gate)
	var out string
	if err := r1.GetInto(c.ctx, &out); err != nil || out != "block" {
		t.Fatalf("the unique task ended %q, %v; want success", out, err)
	}

	failing := c.uniqueSig(key, "fail")
	r2 := c.sendUnique(failing, "the holder succeeded", promise)
	c.recv(started, "the failing unique task")
	c.failure(r2, promise)

	retried := c.uniqueSig(key, "retry")
	retried.RetryCount = 1
	r3 := c.sendUnique(retried, "the holder failed for good", promise)
	c.recv(started, "the retried unique task's first attempt")
	if got := c.recv(started, "the retried unique task's second attempt"); got != "retry 2" {
		t.Fatalf("the retried unique task ran as %q, want %q", got, "retry 2")
	}
	c.duplicate(key, retried.UUID, "while the holder runs its retry", promise)
	close(gate2)
	if err := r3.GetInto(c.ctx, &out); err != nil || out != "retry" {
		t.Fatalf("the retried unique task ended %q, %v; want success", out, err)
	}
	last := c.sendUnique(c.uniqueSig(key, "ok"), "the retried holder succeeded", promise)
	if err := last.GetInto(c.ctx, &out); err != nil || out != "ok" {
		t.Fatalf("the last unique task ended %q, %v; want success", out, err)
	}
}

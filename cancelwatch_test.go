package errand

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestCheckPace: the state checks at lease renewals back off together
// once a read fails; the reads under way then count as that one failure;
// after the backoff one read probes at a time; an answer (a state, or
// ErrTaskNotFound) ends the backoff; the backoff doubles up to
// maxCheckBackoff×ExtendEvery.
func TestCheckPace(t *testing.T) {
	const every = time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	down := errors.New("connection refused")
	p := checkPace{every: every}

	if !p.begin(at(0)) || !p.begin(at(0)) {
		t.Fatal("a healthy backend: every check must read")
	}
	p.end(at(0), at(10*time.Millisecond), down)
	p.end(at(0), at(20*time.Millisecond), down) // under way at the first failure: the same one
	if p.fails != 1 {
		t.Fatalf("two reads under way failed together: %d failures counted, want 1", p.fails)
	}
	if p.begin(at(10*time.Millisecond + every - 1)) {
		t.Fatal("a check read before the backoff (ExtendEvery after the failure) was over")
	}
	if !p.begin(at(10*time.Millisecond + every)) {
		t.Fatal("no check read once the backoff was over: the probe must read")
	}
	if p.begin(at(10*time.Millisecond + every)) {
		t.Fatal("a second check read while the probe was under way: one at a time while reads fail")
	}
	p.end(at(10*time.Millisecond+every), at(2*every), down)
	if p.begin(at(4*every - 1)) {
		t.Fatal("the backoff did not double after a second failure in a row")
	}
	if !p.begin(at(4 * every)) {
		t.Fatal("no probe after the doubled backoff")
	}
	p.end(at(4*every), at(4*every), fmt.Errorf("wrapped: %w", ErrTaskNotFound))
	if !p.begin(at(4*every)) || !p.begin(at(4*every)) {
		t.Fatal("the backend answered (ErrTaskNotFound): the checks must read again, each of them")
	}

	for fails, want := range map[int]time.Duration{1: every, 2: 2 * every, 3: 4 * every, 4: 8 * every, 5: 8 * every, 1000: 8 * every} {
		if got := checkBackoff(every, fails); got != want {
			t.Errorf("checkBackoff(%v, %d) = %v; want %v (doubling from ExtendEvery, at most %d×)", every, fails, got, want, maxCheckBackoff)
		}
	}
}

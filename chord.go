package errand

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// Chords: a member that ends counts itself done in its group; the member
// that completes the group and wins the claim fires the callback.

// completeMember counts sig done in its chord's group and, if it completed
// the group and wins the claim, fires the chord.
func (w *Worker) completeMember(ctx context.Context, sig *Signature) error {
	if sig.GroupUUID == "" || sig.ChordCallback == nil {
		return nil
	}
	be := w.srv.backend
	done, total, err := be.CompleteGroupMember(ctx, sig.GroupUUID, sig.UUID)
	if errors.Is(err, driver.ErrGroupNotFound) {
		return w.groupGone(ctx, sig, err)
	}
	if errors.Is(err, driver.ErrNotMember) {
		// A stray: the message names the group but its UUID is not one of
		// the members (a forged, misrouted or foreign message). Its own state
		// is recorded; it must neither count toward the chord nor fail it,
		// and retrying cannot make it a member. Say so, and settle it.
		w.report(fmt.Errorf("errand: task %s (%s) names chord group %s but is not one of its members: not counted, the chord is left alone: %w", sig.Name, sig.UUID, sig.GroupUUID, err),
			"errand: stray chord completion ignored", append(taskAttrs(sig, sig.RoutingKey), "group", sig.GroupUUID)...)
		return nil
	}
	if err != nil {
		return fmt.Errorf("errand: task %s (%s): complete group member: %w", sig.Name, sig.UUID, err)
	}
	if done < total {
		return nil
	}
	won, err := be.ClaimChord(ctx, sig.GroupUUID, sig.UUID)
	if err != nil {
		return fmt.Errorf("errand: group %s: claim chord: %w", sig.GroupUUID, err)
	}
	if !won {
		return nil
	}
	return w.fireChord(ctx, sig)
}

// groupGone handles sig, which names chord group sig.GroupUUID that the
// backend does not have (err wraps driver.ErrGroupNotFound). With the
// group's metadata gone, nothing proves that sig is one of its members, so
// the callback it names is failed only when the callback's own state says
// its group can be gone: absent (a group outlives its callback's PENDING,
// GroupExpiry being no shorter than ResultExpiry and extended by each
// completion, so both expired) or FAILURE already (a redelivered member
// sends the OnError callbacks again; each is idempotent by UUID). A
// callback still waiting (PENDING, or any state but FAILURE) is left
// alone, and sig is reported as a stray: a message naming a group that was
// never made, or another one's, must not fail a chord it is no member of.
func (w *Worker) groupGone(ctx context.Context, sig *Signature, err error) error {
	cb := sig.ChordCallback.Copy()
	prev, gerr := w.srv.backend.GetState(ctx, cb.UUID)
	switch {
	case errors.Is(gerr, ErrTaskNotFound), gerr == nil && prev.State == StateFailure:
		// The group's metadata expired or was evicted: the chord can never
		// complete. Say so on the callback instead of retrying forever.
		return w.failChord(ctx, cb, fmt.Sprintf("chord group %s is gone from the backend (expired or evicted): its callback cannot run", sig.GroupUUID))
	case gerr != nil:
		return fmt.Errorf("errand: task %s (%s): chord group %s not found: read its callback %s: %w", sig.Name, sig.UUID, sig.GroupUUID, cb.UUID, gerr)
	}
	w.report(fmt.Errorf("errand: task %s (%s) names chord group %s, which the backend does not have, and callback %s (%s), which is %s: not a member of its group, the callback is left alone: %w", sig.Name, sig.UUID, sig.GroupUUID, cb.Name, cb.UUID, prev.State, err),
		"errand: stray chord completion ignored", append(taskAttrs(sig, sig.RoutingKey), "group", sig.GroupUUID)...)
	return nil
}

// selfCallback returns why sig must be neither sent nor run (wrapping
// ErrUUIDConflict), or nil: a signature whose ChordCallback has its own
// UUID claims to be the callback of the group it names, which a chord's
// callback never is (a member and its callback are distinct tasks). Run,
// it would be that callback, started before its group completed; a buggy
// or hostile producer copying a callback's signature into a group makes
// one.
func selfCallback(sig *Signature) error {
	if sig.ChordCallback == nil || sig.ChordCallback.UUID != sig.UUID {
		return nil
	}
	return fmt.Errorf("%w: task %q under UUID %s names that UUID as its own chord callback (group %s)", ErrUUIDConflict, sig.Name, sig.UUID, sig.GroupUUID)
}

// fireChord reads every member's state once and sends the callback with
// their results in group order, or, if a member failed (any state but
// SUCCESS and CANCELLED), marks the callback FAILURE and sends its OnError
// callbacks instead; else, if a member was cancelled, cancels the
// callback (recorded CANCELLED, never run, its OnError callbacks not run:
// a cancel is not a failure).
func (w *Worker) fireChord(ctx context.Context, member *Signature) error {
	be := w.srv.backend
	cb := member.ChordCallback.Copy()
	states, err := be.GroupStates(ctx, member.GroupUUID)
	if err != nil {
		return fmt.Errorf("errand: group %s: read member states: %w", member.GroupUUID, err)
	}
	var args []Arg
	cancelled := false
	for i, st := range states {
		switch st.State {
		case StateSuccess:
			args = append(args, resultArgs(st.Results)...)
		case StateCancelled:
			cancelled = true
		default:
			return w.failChord(ctx, cb, fmt.Sprintf("chord member %d, task %s (%s), ended %s: %s", i, st.TaskName, st.TaskUUID, st.State, st.Error))
		}
	}
	if cancelled {
		if err := w.cancelUnsent(ctx, []*Signature{cb}); err != nil {
			return fmt.Errorf("errand: group %s: a member was cancelled: cancel the chord callback: %w", member.GroupUUID, err)
		}
		return nil
	}
	if !cb.Immutable {
		cb.Args = append(cb.Args, args...)
	}
	if err := w.sendCallbacks(ctx, []*Signature{cb}); err != nil {
		return fmt.Errorf("errand: group %s: send chord callback: %w", member.GroupUUID, err)
	}
	return nil
}

func (w *Worker) failChord(ctx context.Context, cb *Signature, errText string) error {
	be := w.srv.backend
	prev, err := be.GetState(ctx, cb.UUID)
	if err != nil && !errors.Is(err, ErrTaskNotFound) {
		return fmt.Errorf("errand: chord callback %s: read state: %w", cb.UUID, err)
	}
	if prev == nil || !prev.State.Terminal() {
		now := stateTime()
		st := &TaskState{TaskUUID: cb.UUID, TaskName: cb.Name, State: StateFailure, Attempt: cb.attempt(),
			Error: errText, ErrorKind: string(KindFailed), CreatedAt: now, FinishedAt: now}
		if prev != nil {
			st.CreatedAt, st.FinishedAt = prev.CreatedAt, notBefore(now, prev.CreatedAt)
		}
		if err := be.SetState(ctx, st); err != nil {
			return fmt.Errorf("errand: chord callback %s: set FAILURE: %w", cb.UUID, err)
		}
	}
	if err := w.sendCallbacks(ctx, errorCallbacks(cb.OnError, errText)); err != nil {
		return fmt.Errorf("errand: chord callback %s: send OnError callbacks: %w", cb.UUID, err)
	}
	return nil
}

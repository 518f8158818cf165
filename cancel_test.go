package errand_test

import (
	"errors"
	"testing"

	"github.com/errand-go/errand"
)

// TestCancelQueuedAnswersEachOutcome: a task no worker has taken is
// recorded CANCELLED (queued), Get then returns a *TaskError of kind
// cancelled satisfying errors.Is(err, ErrCancelled); a second cancel of it
// is finished, an id nobody knows is unknown, each with a nil error.
func TestCancelQueuedAnswersEachOutcome(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t)
	r, err := e.srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.srv.Cancel(ctx, r.Signature.UUID)
	if err != nil || rep.Outcome != errand.CancelQueued || rep.Group || len(rep.Tasks) != 1 ||
		rep.Tasks[0] != (errand.TaskCancel{UUID: r.Signature.UUID, Name: "add", Outcome: errand.CancelQueued, Prev: errand.StatePending}) {
		t.Fatalf("Cancel of a queued task = %+v, %v; want queued, prev PENDING", rep, err)
	}
	_, err = r.Get(ctx)
	var te *errand.TaskError
	if !errors.As(err, &te) || te.Kind != errand.KindCancelled || !errors.Is(err, errand.ErrCancelled) {
		t.Fatalf("Get of a cancelled task = %v; want a *TaskError of kind cancelled satisfying errors.Is(err, ErrCancelled)", err)
	}
	st, err := r.State(ctx)
	if err != nil || st.State != errand.StateCancelled || st.Error != "errand: task cancelled" || st.ErrorKind != "cancelled" || st.FinishedAt.Before(st.CreatedAt) {
		t.Fatalf("cancelled state = %+v, %v; want CANCELLED, its error and kind, FinishedAt not before CreatedAt", st, err)
	}
	if rep, err := r.Cancel(ctx); err != nil || rep.Outcome != errand.CancelFinished || rep.Tasks[0].Prev != errand.StateCancelled {
		t.Fatalf("second cancel = %+v, %v; want finished (prev CANCELLED), nil error", rep, err)
	}
	if rep, err := e.srv.Cancel(ctx, "no-such-task"); err != nil || rep.Outcome != errand.CancelUnknown || rep.Tasks[0].Prev != "" {
		t.Fatalf("cancel of an unknown id = %+v, %v; want unknown, nil error", rep, err)
	}
	if _, err := e.srv.Cancel(ctx, ""); err == nil {
		t.Fatal("cancel of an empty id: want an error")
	}
	e.srv.Close()
	if _, err := e.srv.Cancel(ctx, r.Signature.UUID); !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("cancel on a closed server = %v; want ErrClosed", err)
	}
}

// TestCancelChordByGroupID: a chord's group UUID names its members; a
// chord handle cancels the members and the callback.
func TestCancelChordByGroupID(t *testing.T) {
	ctx := ctxT(t)
	e := newEnv(t)
	g, _ := errand.NewGroup(errand.NewSignature("add", 1, 2), errand.NewSignature("add", 3, 4))
	c, _ := errand.NewChord(g, errand.NewSignature("add", 10))
	cr, err := e.srv.SendChord(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.srv.Cancel(ctx, g.GroupUUID)
	if err != nil || !rep.Group || rep.Outcome != errand.CancelQueued || len(rep.Tasks) != 2 ||
		rep.Tasks[0].UUID != g.Tasks[0].UUID || rep.Tasks[1].UUID != g.Tasks[1].UUID {
		t.Fatalf("Cancel(group) = %+v, %v; want both members queued, in group order", rep, err)
	}
	rep, err = cr.Cancel(ctx)
	if err != nil || !rep.Group || len(rep.Tasks) != 3 || rep.Tasks[0].Outcome != errand.CancelFinished ||
		rep.Tasks[2].Outcome != errand.CancelQueued || rep.Outcome != errand.CancelQueued {
		t.Fatalf("chord Cancel = %+v, %v; want members finished, callback queued", rep, err)
	}
}

package errand_test

import (
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// A redelivered task whose FAILURE was recorded without an error kind (an
// older worker, or a backend that keeps no kind) is archived with the
// recorded error text; the worker goes on.
func TestRedeliveredFailureWithoutKindIsArchived(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ran := make(chan struct{}, 1)
	if err := e.srv.Register("old", func() error { ran <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	sig := errand.NewSignature("old")
	if _, err := e.srv.SendTask(ctx, sig); err != nil {
		t.Fatal(err)
	}
	// What an older worker left: FAILURE with text only, message not acked.
	st := &errand.TaskState{TaskUUID: sig.UUID, TaskName: "old", State: errand.StateFailure, Attempt: 1,
		Error: "boom from an older worker", CreatedAt: time.Now().UTC(), FinishedAt: time.Now().UTC()}
	if err := setState(ctx, e.srv.Backend(), st); err != nil {
		t.Fatal(err)
	}
	e.start(t, errand.WorkerConfig{})
	var ti errand.QueuedTask
	for {
		var err error
		ti, err = e.srv.ArchivedTask(ctx, errand.DefaultQueue, sig.UUID)
		if err == nil {
			break
		}
		if !errors.Is(err, errand.ErrNotArchived) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("archive promise broken: a redelivered FAILURE without a kind was never archived")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if ti.Archive.Error != "boom from an older worker" || ti.Archive.Reason != "failed" {
		t.Errorf("archived with reason %q, error %q; want failed, the recorded text", ti.Archive.Reason, ti.Archive.Error)
	}
	select {
	case <-ran:
		t.Errorf("a task recorded FAILURE ran again on its redelivery")
	default:
	}
}

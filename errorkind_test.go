package errand_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/errand-go/errand"
)

// TestProducerSeesErrorKinds (issue 14, item 7): the producer's Get error
// carries the failure's kind, so errors.Is and errors.As work on it as the
// docs promise, not only on the worker's side.
func TestProducerSeesErrorKinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.srv.Register("add", func(a, b int) (int, error) { return a + b, nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Register("panics", func() error { panic("kaboom") }); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Register("perm", func() error { return errand.Permanent(errors.New("invalid order")) }); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Register("slow", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Register("flaky", func() error { return errors.New("still broken") }); err != nil {
		t.Fatal(err)
	}
	e.start(t, errand.WorkerConfig{UnknownTaskAttempts: 1})
	ctx := ctxT(t)
	get := func(sig *errand.Signature) error {
		t.Helper()
		r, err := e.srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Get(ctx)
		if !isTaskFailure(err) {
			t.Fatalf("task %s: Get = %v, want a recorded FAILURE", sig.Name, err)
		}
		return err
	}

	err := get(errand.NewSignature("no.such.task", 1))
	if !errors.Is(err, errand.ErrUnknownTask) {
		t.Errorf("error kinds promise broken: unknown task's Get error %q does not satisfy errors.Is(err, ErrUnknownTask)", err)
	}
	var te *errand.TaskError
	if errors.As(err, &te) && te.Kind != errand.KindUnknownTask {
		t.Errorf("error kinds promise broken: unknown task's TaskError.Kind = %q, want %q", te.Kind, errand.KindUnknownTask)
	}

	err = get(errand.NewSignature("add", 1, "two"))
	var argErr *errand.ArgumentError
	switch {
	case !errors.Is(err, errand.ErrBadArguments):
		t.Errorf("error kinds promise broken: bad arguments' Get error %q does not satisfy errors.Is(err, ErrBadArguments)", err)
	case !errors.As(err, &argErr):
		t.Errorf("error kinds promise broken: bad arguments' Get error %q is not an *ArgumentError to errors.As", err)
	case argErr.TaskName != "add" || argErr.Index != 1 || argErr.Got != "string" || argErr.Want != "int":
		t.Errorf("error kinds promise broken: ArgumentError read back as %+v, want task add, index 1, got string, want int", argErr)
	}
	err = get(errand.NewSignature("add", 1, 2, 3))
	if !errors.As(err, &argErr) || argErr.Index != -1 || argErr.Got != "3" {
		t.Errorf("error kinds promise broken: wrong argument count read back as %v (%+v), want Index -1, Got 3", err, argErr)
	}

	err = get(errand.NewSignature("panics"))
	var pe *errand.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom" || !strings.Contains(pe.Stack, "goroutine") {
		t.Errorf("error kinds promise broken: panic's Get error %q is not a *PanicError with the value and stack (%+v)", err, pe)
	}

	err = get(errand.NewSignature("perm"))
	var perm *errand.PermanentError
	if !errors.As(err, &perm) || perm.Error() != "invalid order" {
		t.Errorf("error kinds promise broken: permanent failure's Get error %q is not a *PermanentError with the cause's text", err)
	}

	slow := errand.NewSignature("slow")
	slow.Timeout = 20 * 1e6 // 20ms
	err = get(slow)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error kinds promise broken: a task timeout's Get error %q does not satisfy errors.Is(err, context.DeadlineExceeded)", err)
	}

	flaky := errand.NewSignature("flaky")
	flaky.RetryCount = 2
	err = get(flaky)
	if !errors.Is(err, errand.ErrRetriesExhausted) || !strings.HasSuffix(err.Error(), ": still broken") {
		t.Errorf("error kinds promise broken: retries exhausted gave %q; want errors.Is(err, ErrRetriesExhausted) and the last error's text", err)
	}
	if errors.Is(err, errand.ErrUnknownTask) || errors.Is(err, errand.ErrBadArguments) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error kinds promise broken: a plain failure %q satisfies a kind it does not have", err)
	}
}

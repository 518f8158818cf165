package errand_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// The engine's side of sending inside a caller's transaction (tx.go),
// beyond what the conformance kit's Worker/Tx cases check on every pair.

// TestTxNeverReachesWorkerSends: a task middleware that puts a
// transaction in the task's ctx (one never committed) does not pull the
// worker's sends after the task into it: the task's OnSuccess callback
// and its retry are sent outside any transaction, and run.
func TestTxNeverReachesWorkerSends(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tx := br.Begin() // never committed
	defer tx.Rollback()
	if err := srv.Register("flaky", func(ctx context.Context) (string, error) {
		if ti, _ := errand.TaskInfoFrom(ctx); ti.Attempt == 1 {
			return "", errand.RetryLater(0, errors.New("once more"))
		}
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register("after", func(s string) (string, error) { return s + "+after", nil }); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 1, ErrorBackoff: 10 * time.Millisecond, RetryPolicy: errand.Fixed(0),
		Middleware: []errand.Middleware{func(next errand.TaskHandler) errand.TaskHandler {
			return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
				return next(errand.WithTx(ctx, tx), sig)
			}
		}}})
	w.Start()
	defer w.Shutdown(context.Background())
	sig := errand.NewSignature("flaky")
	sig.RetryCount = 1
	cb := errand.NewSignature("after")
	sig.OnSuccess = []*errand.Signature{cb}
	r, err := srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx); err != nil {
		t.Fatalf("the task: %v, want SUCCESS on its retry", err)
	}
	var got string
	if err := srv.Result(cb.UUID).GetInto(ctx, &got); err != nil || got != "done+after" {
		t.Fatalf("the retry and the callback of a task whose ctx a middleware gave a transaction ended %q, %v; want done+after: a worker's sends never go inside a caller's transaction", got, err)
	}
}

// TestTxRequeueOutside: Requeue with a ctx carrying a transaction (an
// operator's call) records PENDING and publishes outside it: the task is
// PENDING at once, and runs, though the transaction never commits.
func TestTxRequeueOutside(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	fail := true
	if err := srv.Register("once", func() error {
		if fail {
			fail = false
			return errand.Permanent(errors.New("not yet"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 1, ErrorBackoff: 10 * time.Millisecond})
	sig := errand.NewSignature("once")
	r, err := srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	if _, err := r.Get(ctx); !errors.As(err, new(*errand.TaskError)) {
		t.Fatalf("first run: %v, want its failure", err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := srv.ArchivedTask(ctx, errand.DefaultQueue, sig.UUID); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the failed task never reached the archive")
		case <-time.After(5 * time.Millisecond):
		}
	}
	tx := br.Begin() // never committed
	defer tx.Rollback()
	if err := srv.Requeue(errand.WithTx(ctx, tx), errand.DefaultQueue, sig.UUID); err != nil {
		t.Fatal(err)
	}
	if st, err := be.GetState(ctx, sig.UUID); err != nil || st.State != errand.StatePending {
		t.Fatalf("after Requeue with a ctx carrying a transaction, the task reads %v, %v; want PENDING at once: an operator's call never writes inside a caller's transaction", st, err)
	}
	w = srv.NewWorker(errand.WorkerConfig{Concurrency: 1, ErrorBackoff: 10 * time.Millisecond})
	w.Start()
	defer w.Shutdown(context.Background())
	if _, err := r.Get(ctx); err != nil {
		t.Fatalf("the requeued task: %v, want SUCCESS", err)
	}
}

// txGatedBroker is a memory broker whose co-located Send, outside a
// transaction, blocks until gate is closed, after signalling entered.
type txGatedBroker struct {
	*memorybroker.Broker
	gate    chan struct{}
	entered chan struct{}
}

func (b *txGatedBroker) Colocate(be driver.Backend) driver.Colocation {
	c := b.Broker.Colocate(be)
	if c == nil {
		return nil
	}
	return txGatedColocation{c, b}
}

type txGatedColocation struct {
	driver.Colocation
	b *txGatedBroker
}

func (c txGatedColocation) Send(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
	if driver.TxFrom(ctx) == nil {
		c.b.entered <- struct{}{}
		<-c.b.gate
	}
	return c.Colocation.Send(ctx, sts, msgs)
}

// TestTxSendJoinsNoOtherSend: while every co-located call of a queue is
// in flight (so that SendTask calls outside a transaction wait to join
// the next), a SendTask inside a transaction goes at once, in a call of
// its own, and is rolled back alone.
func TestTxSendJoinsNoOtherSend(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	br := &txGatedBroker{Broker: memorybroker.New(nil), gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	be := memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var outside []*errand.Signature
	errs := make(chan error, 3)
	for range 3 { // two calls in flight, the third send waiting to join the next
		sig := errand.NewSignature("t")
		outside = append(outside, sig)
		go func() {
			_, err := srv.SendTask(ctx, sig)
			errs <- err
		}()
	}
	for range 2 {
		select {
		case <-br.entered:
		case <-ctx.Done():
			t.Fatal("the sends outside a transaction never reached the broker")
		}
	}
	tx := br.Begin()
	inside := errand.NewSignature("t")
	sent := make(chan error, 1)
	go func() {
		_, err := srv.SendTask(errand.WithTx(ctx, tx), inside)
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("SendTask inside a transaction: %v", err)
		}
	case <-time.After(10 * time.Second): // a bound against a hang, not a timing claim
		t.Fatal("SendTask inside a transaction waited for the calls of sends outside it: a send inside a transaction must be a call of its own, joined with no other")
	}
	close(br.gate)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("SendTask outside a transaction: %v", err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	stats, err := br.Stats(ctx, errand.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Pending != len(outside) {
		t.Errorf("after the rollback the queue holds %d messages; want the %d sent outside the transaction", stats.Pending, len(outside))
	}
	if _, err := be.GetState(ctx, inside.UUID); !errors.Is(err, errand.ErrTaskNotFound) {
		t.Errorf("the task sent inside a rolled-back transaction reads %v; want ErrTaskNotFound", err)
	}
	for _, sig := range outside {
		if st, err := be.GetState(ctx, sig.UUID); err != nil || st.State != errand.StatePending {
			t.Errorf("task %s sent outside the transaction reads %v, %v after its rollback; want PENDING", sig.UUID, st, err)
		}
	}
}

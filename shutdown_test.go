package errand_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// blockingBroker is a broker (with a pause flag and a registry of workers)
// whose every call blocks until its ctx is done, counting the calls.
type blockingBroker struct {
	*memorybroker.Broker
	calls atomic.Int64
}

func (b *blockingBroker) block(ctx context.Context) error {
	b.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (b *blockingBroker) Publish(ctx context.Context, _ ...driver.Message) error { return b.block(ctx) }
func (b *blockingBroker) Fetch(ctx context.Context, _ string, _ int, _ time.Duration) ([]*driver.Delivery, error) {
	return nil, b.block(ctx)
}
func (b *blockingBroker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	return driver.BatchErrors(len(ds), b.block(ctx))
}
func (b *blockingBroker) Release(ctx context.Context, _ *driver.Delivery, _ time.Time) error {
	return b.block(ctx)
}
func (b *blockingBroker) Extend(ctx context.Context, _ *driver.Delivery, _ time.Duration) error {
	return b.block(ctx)
}
func (b *blockingBroker) Reject(ctx context.Context, _ *driver.Delivery, _ string) error {
	return b.block(ctx)
}
func (b *blockingBroker) Paused(ctx context.Context) ([]string, error) { return nil, b.block(ctx) }
func (b *blockingBroker) Beat(ctx context.Context, _ string, _ []byte, _ time.Duration) error {
	return b.block(ctx)
}
func (b *blockingBroker) Unbeat(ctx context.Context, _ string) error { return b.block(ctx) }

// A worker never started shuts down at once and never calls the broker
// (WorkerConfig and Worker.Shutdown docs): no pause poll, no heartbeat, no
// fetch, even over a broker that never answers.
func TestShutdownNeverStartedCallsNothing(t *testing.T) {
	checkNoLeak(t)
	br := &blockingBroker{Broker: memorybroker.New(nil)}
	be := memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []errand.WorkerConfig{
		{PausePoll: time.Millisecond, Heartbeat: time.Millisecond},
		{Queues: map[string]int{"a": 2, "b": 1}, PausePoll: time.Millisecond, Heartbeat: time.Millisecond},
	} {
		w := srv.NewWorker(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		begin := time.Now()
		err := w.Shutdown(ctx)
		cancel()
		if err != nil {
			t.Errorf("Shutdown of a worker never started (queues %v) = %v after %v; want nil at once", cfg.Queues, err, time.Since(begin))
		}
	}
	if n := br.calls.Load(); n != 0 {
		t.Errorf("Shutdown of workers never started made %d broker calls; want none", n)
	}
}

// While Shutdown waits for a running task, the worker stays in the
// registry of live workers with that task (WorkerConfig.Heartbeat); once
// Shutdown returns, it is gone.
func TestShutdownKeepsHeartbeatUntilDrained(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	started, finish := make(chan struct{}), make(chan struct{})
	e.srv.Register("slow", func() error {
		close(started)
		<-finish
		return nil
	})
	ctx := ctxT(t)
	w := e.srv.NewWorker(errand.WorkerConfig{Heartbeat: 10 * time.Millisecond})
	w.Start()
	sig := errand.NewSignature("slow")
	if _, err := e.srv.SendTask(ctx, sig); err != nil {
		t.Fatal(err)
	}
	<-started
	listed := func() (errand.WorkerInfo, bool) {
		ws, err := e.srv.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ws, func(wi errand.WorkerInfo) bool { return wi.ID == w.ID() })
		if i < 0 {
			return errand.WorkerInfo{}, false
		}
		return ws[i], true
	}
	running := func(wi errand.WorkerInfo) bool {
		return slices.ContainsFunc(wi.Running, func(r errand.RunningTask) bool { return r.UUID == sig.UUID })
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if wi, ok := listed(); ok && running(wi) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Server.Workers never listed the worker running its task")
		}
		time.Sleep(5 * time.Millisecond)
	}
	shutAt := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- w.Shutdown(ctx) }()
	// Beats keep coming during the shutdown, each with the task: wait for
	// one sent well after it began (the entry lives 3×Heartbeat unrenewed).
	for deadline := time.Now().Add(5 * time.Second); ; {
		wi, ok := listed()
		if !ok || !running(wi) {
			close(finish)
			<-shut
			t.Fatalf("during Shutdown with task %s still running, Server.Workers lists the worker as %+v (listed %v); want it listed with that task until the task returns", sig.UUID, wi, ok)
		}
		if wi.BeatAt.After(shutAt.Add(50 * time.Millisecond)) {
			break
		}
		if time.Now().After(deadline) {
			close(finish)
			<-shut
			t.Fatalf("no heartbeat during Shutdown while task %s runs: last beat %v, shutdown began %v", sig.UUID, wi.BeatAt, shutAt)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(finish)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if wi, ok := listed(); ok {
		t.Errorf("after Shutdown returned, Server.Workers still lists the worker: %+v", wi)
	}
}

// Shutdown may be called again: after a worker ran, and after a worker
// never started.
func TestShutdownTwice(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	w := e.srv.NewWorker(errand.WorkerConfig{})
	w.Start()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	idle := e.srv.NewWorker(errand.WorkerConfig{})
	if err := idle.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := idle.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown of a worker never started: %v", err)
	}
}

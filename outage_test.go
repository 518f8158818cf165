package errand_test

// Issue 15, items 9 and 10: a worker riding out a server outage — lease
// extensions retried within the lease, reported once, and the fetch loop
// backing off exponentially with jitter. Fake time (testing/synctest); the
// same outage on a real paused Redis is brokers/redis/pause_test.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// pausedBroker stands for a server that stops answering for a while
// (Redis under CLIENT PAUSE): an Extend issued during the outage waits
// until it ends, or fails when its ctx ends first.
type pausedBroker struct {
	*memorybroker.Broker
	mu       sync.Mutex
	from, to time.Time
	extends  atomic.Int32
}

func (b *pausedBroker) pause(from, to time.Time) {
	b.mu.Lock()
	b.from, b.to = from, to
	b.mu.Unlock()
}

func (b *pausedBroker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	b.extends.Add(1)
	b.mu.Lock()
	from, to := b.from, b.to
	b.mu.Unlock()
	if now := time.Now(); !now.Before(from) && now.Before(to) {
		t := time.NewTimer(to.Sub(now))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Broker.Extend(ctx, d, lease)
}

// TestLeaseSurvivesOutageShorterThanLease (item 9): with a 4s lease
// renewed every 2.2s, the server stops answering from 1s to 3.65s after the
// task started — shorter than the lease. The renewal due at 2.2s times out
// (at 3.3s); retried at once, it gets through when the outage ends, so a
// second worker waiting on the queue never receives the task. Waiting for
// the next tick (4.4s), as before, let the lease lapse at 4s and the task
// run twice.
func TestLeaseSurvivesOutageShorterThanLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		pb := &pausedBroker{Broker: e.broker}
		var runs atomic.Int32
		task := func(ctx context.Context) (string, error) {
			if runs.Add(1) == 1 {
				now := time.Now()
				pb.pause(now.Add(time.Second), now.Add(3650*time.Millisecond))
			}
			select {
			case <-time.After(6 * time.Second): // the task's own work
				return "done", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		var reports []error
		var mu sync.Mutex
		srv, _ := errand.NewServer(errand.Config{Broker: pb, Backend: e.rec})
		srv.Register("work", task)
		w := srv.NewWorker(errand.WorkerConfig{Lease: 4 * time.Second, ExtendEvery: 2200 * time.Millisecond,
			ErrorHandler: func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() }})
		w.Start()
		e.srv.Register("work", task)
		e.start(t, errand.WorkerConfig{Lease: 4 * time.Second}) // the second worker
		ctx := ctxT(t)
		r, _ := srv.SendTask(ctx, errand.NewSignature("work"))
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("lease promise broken: an outage of 2.65s (< the 4s lease) made the task run %d times; a failed extend must be retried within the lease", n)
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reports) > 1 {
			t.Errorf("lease promise broken: one outage was reported %d times, want once: %v", len(reports), reports)
		}
	})
}

// TestLeaseLostReportedOnce (item 9): once the broker says the lease is
// lost, the worker stops extending and reports it once, not every tick;
// the task that ignores its cancelled ctx and returns later has its
// outcome dropped, reported once more (issue 24, item 3).
func TestLeaseLostReportedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		lost := newDeliveryCounter(e.broker)
		var extends atomic.Int32
		lost.extend = func(context.Context, *driver.Delivery, time.Duration) error {
			extends.Add(1)
			return fmt.Errorf("test broker: %w", driver.ErrLeaseLost)
		}
		var leaseLost atomic.Int32
		srv, _ := errand.NewServer(errand.Config{Broker: lost, Backend: e.rec})
		returned := make(chan struct{})
		srv.Register("long", func(ctx context.Context) error {
			defer close(returned)
			time.Sleep(10 * time.Second) // the task's own work, ignoring its ctx: 10 extend ticks
			return nil
		})
		// The memory broker's own lease (an hour) never lapses: only the
		// wrapper says it was lost.
		w := srv.NewWorker(errand.WorkerConfig{Lease: time.Hour, ExtendEvery: time.Second, ErrorHandler: func(err error) {
			if errors.Is(err, driver.ErrLeaseLost) {
				leaseLost.Add(1)
			}
		}})
		w.Start()
		ctx := ctxT(t)
		sig := errand.NewSignature("long")
		if _, err := srv.SendTask(ctx, sig); err != nil {
			t.Fatal(err)
		}
		<-returned
		if err := w.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if n := extends.Load(); n != 1 {
			t.Errorf("lease promise broken: Extend called %d times after the broker answered ErrLeaseLost, want 1 (stop extending)", n)
		}
		if n := leaseLost.Load(); n != 2 {
			t.Errorf("lease promise broken: ErrLeaseLost reported %d times over 10 ticks, want twice (the loss, then the late outcome left unrecorded)", n)
		}
		if st, err := e.rec.GetState(ctx, sig.UUID); err != nil || st.State != errand.StateStarted {
			t.Errorf("lost lease promise broken: the task that returned after its lease was lost left state %+v, %v; want STARTED (its outcome not recorded)", st, err)
		}
	})
}

// flakyFetch fails every Fetch call except those listed in ok, which
// return nothing and no error (a long poll that found nothing), and records
// when each call came.
type flakyFetch struct {
	*memorybroker.Broker
	ok    map[int]bool
	mu    sync.Mutex
	at    []time.Time
	until int
	done  chan struct{}
}

func (b *flakyFetch) Fetch(ctx context.Context, q string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	b.mu.Lock()
	b.at = append(b.at, time.Now())
	n := len(b.at)
	b.mu.Unlock()
	if n == b.until {
		close(b.done)
	}
	if b.ok[n] {
		return nil, nil
	}
	return nil, errors.New("test broker: connection refused")
}

// TestFetchBackoffExponentialWithJitter (item 10): after failed fetches
// the loop waits ErrorBackoff, 2×, 4×, ... up to MaxErrorBackoff, each
// wait drawn from [d/2, d]; a successful fetch starts again from
// ErrorBackoff.
func TestFetchBackoffExponentialWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls = 14
		fb := &flakyFetch{Broker: memorybroker.New(nil), ok: map[int]bool{9: true}, until: calls, done: make(chan struct{})}
		defer fb.Close()
		e := newEnv(t)
		srv, _ := errand.NewServer(errand.Config{Broker: fb, Backend: e.rec})
		w := srv.NewWorker(errand.WorkerConfig{ErrorBackoff: time.Second, MaxErrorBackoff: 10 * time.Second})
		w.Start()
		<-fb.done
		w.Shutdown(context.Background())
		fb.mu.Lock()
		defer fb.mu.Unlock()
		var gaps []time.Duration
		for i := 1; i < calls; i++ {
			gaps = append(gaps, fb.at[i].Sub(fb.at[i-1]))
		}
		// Calls 1-8 fail, 9 succeeds (returns at once), 10-14 fail again.
		steps := []time.Duration{1, 2, 4, 8, 10, 10, 10, 10, 0, 1, 2, 4, 8}
		for i, s := range steps {
			d := s * time.Second
			if gaps[i] < d/2 || gaps[i] > d {
				t.Errorf("fetch backoff promise broken: wait after call %d was %v, want within [%v, %v] (ErrorBackoff 1s doubling to MaxErrorBackoff 10s, equal jitter, reset by a successful fetch); all waits: %v", i+1, gaps[i], d/2, d, gaps)
			}
		}
		if gaps[4] == gaps[5] && gaps[5] == gaps[6] && gaps[6] == gaps[7] {
			t.Errorf("fetch backoff promise broken: four waits at the cap are all %v: no jitter, so workers reconnecting together stay together", gaps[4])
		}
	})
}

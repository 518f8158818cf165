package errand_test

// Issue 24, items 1, 3 and 4: Shutdown returns by its deadline and keeps
// what finishes within the settle grace; a lost lease cancels the
// handler's ctx with a cause, and its late outcome is never recorded;
// TaskInfo.RetryCount is what the worker allows. Fake time
// (testing/synctest): the order of events is asserted, and synctest fails
// a test whose goroutines outlive it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// settleCounter is the memory broker counting the settling calls errand
// makes, with an Extend a test may replace.
type settleCounter struct {
	*memorybroker.Broker
	extend                 func(ctx context.Context, d *driver.Delivery, lease time.Duration) error
	acks, releases, extent atomic.Int32
}

func (b *settleCounter) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	b.acks.Add(int32(len(ds)))
	return b.Broker.Ack(ctx, ds)
}

func (b *settleCounter) Release(ctx context.Context, d *driver.Delivery, nb time.Time) error {
	b.releases.Add(1)
	return b.Broker.Release(ctx, d, nb)
}

func (b *settleCounter) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	b.extent.Add(1)
	if b.extend != nil {
		return b.extend(ctx, d, lease)
	}
	return b.Broker.Extend(ctx, d, lease)
}

// queueStats returns the default queue's counts.
func queueStats(t *testing.T, ctx context.Context, srv *errand.Server) driver.QueueStats {
	t.Helper()
	qi, err := srv.Queue(ctx, errand.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Stats
}

// TestShutdownKeepsLateResults is the scenario: Shutdown with a
// 500ms deadline while 10 tasks run, 2 of which ignore their ctx and
// return 2s later. Shutdown returns at its deadline, while the two are
// still blocked, with a *ShutdownError naming them; the 8 that honour
// their ctx are released for another worker; the 2 latecomers' SUCCESS is
// recorded and their messages acked within the settle grace, and nothing
// they did runs twice.
func TestShutdownKeepsLateResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		const n, late = 10, 2
		var mu sync.Mutex
		runs := map[int]int{}
		started := make(chan int, 2*n)
		release := make(chan struct{})
		var lateReturned atomic.Int32
		e.srv.Register("work", func(ctx context.Context, i int) (string, error) {
			mu.Lock()
			runs[i]++
			run := runs[i]
			mu.Unlock()
			if run > 1 {
				return fmt.Sprint("again ", i), nil
			}
			started <- i
			if i < late {
				<-release // ignores its ctx
				lateReturned.Add(1)
				return fmt.Sprint("late ", i), nil
			}
			<-ctx.Done()
			return "", ctx.Err()
		})
		ctx := ctxT(t)
		w := e.srv.NewWorker(errand.WorkerConfig{Concurrency: n})
		w.Start()
		var rs []*errand.AsyncResult
		for i := range n {
			r, err := e.srv.SendTask(ctx, errand.NewSignature("work", i))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		for range n {
			<-started
		}

		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		begin := time.Now()
		err := w.Shutdown(sctx)
		took := time.Since(begin)
		if lateReturned.Load() != 0 {
			t.Fatal("a task blocked on the test's channel returned before the test released it")
		}
		if took > 500*time.Millisecond {
			t.Errorf("shutdown promise broken: Shutdown with a 500ms deadline returned after %v (fake clock), waiting for tasks that ignore their ctx; want by its deadline", took)
		}
		var se *errand.ShutdownError
		if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown past its deadline = %v; want a *ShutdownError satisfying errors.Is(err, context.DeadlineExceeded)", err)
		}
		var running []string
		for _, rt := range se.Running {
			running = append(running, rt.UUID)
		}
		for i := range late {
			if !slices.Contains(running, rs[i].Signature.UUID) {
				t.Errorf("ShutdownError.Running = %v, want it to name task %d (%s), still running: %v", running, i, rs[i].Signature.UUID, err)
			}
		}

		// The 8 that honoured their ctx are given back, unrecorded.
		synctest.Wait()
		if st := queueStats(t, ctx, e.srv); st.Pending != n-late || st.InFlight != late {
			t.Errorf("after Shutdown gave up, the queue holds %+v; want the %d cancelled tasks released (pending) and the %d still running in flight", st, n-late, late)
		}
		// The latecomers return 2s after the deadline, within the grace.
		time.Sleep(2 * time.Second)
		close(release)
		for i := range late {
			var out string
			if err := rs[i].GetInto(ctx, &out); err != nil || out != fmt.Sprint("late ", i) {
				t.Errorf("settle grace promise broken: task %d returned %q after Shutdown's deadline; recorded %q, %v", i, fmt.Sprint("late ", i), out, err)
			}
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown again, once every task returned: %v; want nil", err)
		}
		if st := queueStats(t, ctx, e.srv); st.InFlight != 0 || st.Pending != n-late {
			t.Errorf("after the latecomers settled the queue holds %+v; want them acked (0 in flight) and %d pending", st, n-late)
		}

		// Another worker runs what was given back; nothing runs twice that
		// finished.
		e.start(t, errand.WorkerConfig{})
		for i := late; i < n; i++ {
			var out string
			if err := rs[i].GetInto(ctx, &out); err != nil || out != fmt.Sprint("again ", i) {
				t.Errorf("task %d, released at shutdown, ended %q, %v; want another worker to finish it", i, out, err)
			}
		}
		time.Sleep(time.Minute) // two leases: a latecomer left in flight would come back
		mu.Lock()
		defer mu.Unlock()
		for i := range late {
			if runs[i] != 1 {
				t.Errorf("settle grace promise broken: task %d, which returned within the grace, ran %d times; want once", i, runs[i])
			}
		}
	})
}

// TestShutdownGraceEnds: a task that returns after the settle grace is
// not recorded and its delivery is not settled: its lease runs out and
// the broker delivers it again. The worker's goroutines end once it has
// returned (synctest fails the test otherwise).
func TestShutdownGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		br := &settleCounter{Broker: e.broker}
		srv, _ := errand.NewServer(errand.Config{Broker: br, Backend: e.rec})
		var runs atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		stuck := func(ctx context.Context) (string, error) {
			if runs.Add(1) > 1 {
				return "again", nil
			}
			close(started)
			<-release
			return "too late", nil
		}
		srv.Register("stuck", stuck)
		e.srv.Register("stuck", stuck)
		var graceOver atomic.Int32
		w := srv.NewWorker(errand.WorkerConfig{Lease: 10 * time.Second, SettleGrace: time.Second, ErrorHandler: func(err error) {
			if err != nil && !errors.Is(err, driver.ErrLeaseLost) {
				graceOver.Add(1)
			}
		}})
		w.Start()
		ctx := ctxT(t)
		sig := errand.NewSignature("stuck")
		r, err := srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := w.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
		}
		time.Sleep(3 * time.Second) // past the 1s grace
		close(release)
		sctx2, cancel2 := context.WithTimeout(ctx, time.Second)
		defer cancel2()
		if err := w.Shutdown(sctx2); err != nil {
			t.Fatalf("Shutdown again after the task returned = %v, want nil (every goroutine returned)", err)
		}
		if st, err := e.rec.GetState(ctx, sig.UUID); err != nil || st.State != errand.StateStarted {
			t.Errorf("settle grace promise broken: a task returning after the grace left state %+v, %v; want STARTED (not recorded)", st, err)
		}
		if a, rl := br.acks.Load(), br.releases.Load(); a != 0 || rl != 0 {
			t.Errorf("settle grace promise broken: a task returning after the grace was settled (%d acks, %d releases); want its delivery left to its lease", a, rl)
		}
		if graceOver.Load() == 0 {
			t.Error("the outcome dropped after the grace was not reported to the ErrorHandler")
		}
		// Its lease runs out; another worker runs it again.
		e.start(t, errand.WorkerConfig{})
		var out string
		if err := r.GetInto(ctx, &out); err != nil || out != "again" {
			t.Errorf("a task left to its lease ended %q, %v; want it delivered again and run", out, err)
		}
	})
}

// TestLeaseLostCancelsTask: when the broker answers ErrLeaseLost to a
// renewal, the running task's ctx is cancelled with a cause satisfying
// errors.Is(cause, errand.ErrLeaseLost); what it returns afterwards is not
// recorded, and its delivery is neither acked nor released.
func TestLeaseLostCancelsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		br := &settleCounter{Broker: e.broker, extend: func(context.Context, *driver.Delivery, time.Duration) error {
			return fmt.Errorf("test broker: %w", driver.ErrLeaseLost)
		}}
		srv, _ := errand.NewServer(errand.Config{Broker: br, Backend: e.rec})
		causes := make(chan error, 1)
		srv.Register("hold", func(ctx context.Context) (string, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return "late", nil // a late success: must not be recorded
		})
		w := srv.NewWorker(errand.WorkerConfig{Lease: time.Hour, ExtendEvery: time.Second})
		w.Start()
		ctx := ctxT(t)
		sig := errand.NewSignature("hold")
		if _, err := srv.SendTask(ctx, sig); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		cause := <-causes
		if !errors.Is(cause, errand.ErrLeaseLost) || !errors.Is(cause, driver.ErrLeaseLost) {
			t.Errorf("lost lease promise broken: the task's ctx ended with cause %v; want one satisfying errors.Is(cause, errand.ErrLeaseLost)", cause)
		}
		if d := time.Since(begin); d > time.Second {
			t.Errorf("the task's ctx was cancelled %v after it began; want at the first renewal (1s), which answered ErrLeaseLost", d)
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if st, err := e.rec.GetState(ctx, sig.UUID); err != nil || st.State != errand.StateStarted {
			t.Errorf("lost lease promise broken: a task returning after its lease was lost left %+v, %v; want STARTED (nothing recorded)", st, err)
		}
		if a, rl := br.acks.Load(), br.releases.Load(); a != 0 || rl != 0 {
			t.Errorf("lost lease promise broken: the worker settled a delivery whose lease it lost (%d acks, %d releases); want neither", a, rl)
		}
	})
}

// TestLeaseRunsOutInOutage: every renewal fails (a server that stopped
// answering). The task's ctx is cancelled with ErrLeaseLost as the lease
// runs out on the worker's clock, not before; another worker then takes
// the message, and the first attempt's late success never overwrites the
// second attempt's.
func TestLeaseRunsOutInOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		br := &settleCounter{Broker: e.broker, extend: func(context.Context, *driver.Delivery, time.Duration) error {
			return errors.New("test broker: connection refused")
		}}
		srvA, _ := errand.NewServer(errand.Config{Broker: br, Backend: e.rec})
		var runs atomic.Int32
		type cancelled struct {
			cause error
			at    time.Time
		}
		causes := make(chan cancelled, 1)
		release := make(chan struct{})
		fn := func(ctx context.Context) (string, error) {
			if runs.Add(1) > 1 {
				return "second", nil
			}
			<-ctx.Done()
			causes <- cancelled{context.Cause(ctx), time.Now()}
			<-release
			return "first", nil
		}
		srvA.Register("hold", fn)
		e.srv.Register("hold", fn)
		const lease, every = 3 * time.Second, time.Second
		// One slot, held by the first attempt: the second goes to the other worker.
		wA := srvA.NewWorker(errand.WorkerConfig{Lease: lease, ExtendEvery: every, Concurrency: 1})
		wA.Start()
		ctx := ctxT(t)
		sig := errand.NewSignature("hold")
		r, err := srvA.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		c := <-causes
		if !errors.Is(c.cause, errand.ErrLeaseLost) {
			t.Errorf("lost lease promise broken: the task's ctx ended with cause %v; want errand.ErrLeaseLost once the lease ran out unrenewed", c.cause)
		}
		if d := c.at.Sub(begin); d < lease-every/10 || d > lease {
			t.Errorf("the task's ctx was cancelled %v after it began, with a %v lease never renewed; want as the lease runs out (within %v before it)", d, lease, every/10)
		}
		// The broker's lease runs out too: another worker takes the task.
		e.start(t, errand.WorkerConfig{})
		var out string
		if err := r.GetInto(ctx, &out); err != nil || out != "second" {
			t.Fatalf("the redelivered attempt ended %q, %v; want second", out, err)
		}
		close(release)
		if err := wA.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := e.rec.GetState(ctx, sig.UUID)
		var got string
		if err == nil && len(st.Results) == 1 {
			json.Unmarshal(st.Results[0].Value, &got)
		}
		if err != nil || st.State != errand.StateSuccess || got != "second" {
			t.Errorf("lost lease promise broken: after the first attempt returned late, the task's state is %+v (%v); want the second attempt's SUCCESS, untouched", st, err)
		}
		if p := e.rec.path(sig.UUID); slices.Index(p, errand.StateSuccess) != len(p)-1 {
			t.Errorf("lost lease promise broken: task went through %v; want one SUCCESS, the second attempt's, last", p)
		}
		if a, rl := br.acks.Load(), br.releases.Load(); a != 0 || rl != 0 {
			t.Errorf("lost lease promise broken: the first worker settled a delivery whose lease it lost (%d acks, %d releases)", a, rl)
		}
	})
}

// TestTaskInfoRetryCount: TaskInfo.RetryCount is the retries the worker
// allows — the signature's, capped at MaxRetries — and the worker runs
// exactly RetryCount+1 attempts of a task that always fails.
func TestTaskInfoRetryCount(t *testing.T) {
	for _, tc := range []struct {
		sigRetries, maxRetries, want int
	}{
		{sigRetries: 5, maxRetries: 2, want: 2},
		{sigRetries: 1, maxRetries: 0, want: 1}, // default MaxRetries, 100
		{sigRetries: 3, maxRetries: -1, want: 0},
	} {
		t.Run(fmt.Sprintf("RetryCount%d/MaxRetries%d", tc.sigRetries, tc.maxRetries), func(t *testing.T) {
			e := newEnv(t)
			var mu sync.Mutex
			var seen []errand.TaskInfo
			e.srv.Register("fails", func(ctx context.Context) error {
				ti, _ := errand.TaskInfoFrom(ctx)
				mu.Lock()
				seen = append(seen, ti)
				mu.Unlock()
				return errors.New("always")
			})
			e.start(t, errand.WorkerConfig{MaxRetries: tc.maxRetries})
			ctx := ctxT(t)
			sig := errand.NewSignature("fails")
			sig.RetryCount = tc.sigRetries
			r, err := e.srv.SendTask(ctx, sig)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Get(ctx); !isTaskFailure(err) {
				t.Fatalf("Get = %v, want the task's failure", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != tc.want+1 {
				t.Errorf("retry promise broken: %d attempts ran; want RetryCount %d capped at MaxRetries %d, plus the first: %d", len(seen), tc.sigRetries, tc.maxRetries, tc.want+1)
			}
			for _, ti := range seen {
				if ti.RetryCount != tc.want {
					t.Errorf("TaskInfo.RetryCount = %d on attempt %d; want %d, what the worker allows (signature %d, MaxRetries %d)", ti.RetryCount, ti.Attempt, tc.want, tc.sigRetries, tc.maxRetries)
				}
			}
			if last := seen[len(seen)-1]; last.Attempt <= last.RetryCount {
				t.Errorf("the last attempt has Attempt %d <= RetryCount %d; want Attempt > RetryCount on the last one", last.Attempt, last.RetryCount)
			}
		})
	}
}

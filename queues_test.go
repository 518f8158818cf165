package errand_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

func TestWorkerQueuesValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  errand.WorkerConfig
		want string
	}{
		{errand.WorkerConfig{Queues: map[string]int{"a": 0}}, `queue "a" has weight 0`},
		{errand.WorkerConfig{Queues: map[string]int{"a": 1}, QueueConcurrency: map[string]int{"a": -1}}, `queue "a" has cap -1`},
		{errand.WorkerConfig{Queues: map[string]int{"a": 1}, QueueConcurrency: map[string]int{"b": 1}}, `names queue "b", which the worker does not consume`},
		{errand.WorkerConfig{Queues: map[string]int{"": 1}}, `empty queue name`},
	} {
		err := errand.ValidateWorkerConfig(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
		e := newEnv(t)
		w := e.srv.NewWorker(tc.cfg)
		if err := w.Run(context.Background()); err == nil || !errors.Is(err, w.Err()) {
			t.Errorf("Run with %+v returned %v, want the configuration error at once", tc.cfg, err)
		}
	}
	// Without Queues the worker consumes the server's default queue: a cap
	// may name it, and only it (NewWorker checks, Validate cannot know it).
	e := newEnv(t)
	if w := e.srv.NewWorker(errand.WorkerConfig{QueueConcurrency: map[string]int{"elsewhere": 1}}); w.Err() == nil || !strings.Contains(w.Err().Error(), `names queue "elsewhere"`) {
		t.Errorf("NewWorker with a cap on a queue other than the default one: Err() = %v, want it refused", w.Err())
	}
	if w := e.srv.NewWorker(errand.WorkerConfig{QueueConcurrency: map[string]int{errand.DefaultQueue: 1}}); w.Err() != nil {
		t.Errorf("NewWorker with a cap on the default queue: Err() = %v, want nil", w.Err())
	}
	ok := errand.WorkerConfig{Queues: map[string]int{"a": 2, "b": 1}, QueueConcurrency: map[string]int{"b": 1}}
	if err := errand.ValidateWorkerConfig(ok); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", ok, err)
	}
}

// An empty queue holds no slot: with Concurrency 1, a worker on an empty
// queue weighted 10 and a busy one weighted 1 runs the busy one's tasks
// one after another; the heartbeat lists both queues; pausing one leaves
// the other running.
func TestWorkerQueuesEmptyQueueHoldsNoSlot(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	var mu sync.Mutex
	var ran []string
	e.srv.Register("tag", func(q string) (string, error) {
		mu.Lock()
		ran = append(ran, q)
		mu.Unlock()
		return q, nil
	})
	ctx := ctxT(t)
	logs := &attrRecorder{}
	w := e.start(t, errand.WorkerConfig{Queues: map[string]int{"empty": 10, "busy": 1}, Concurrency: 1, PausePoll: 10 * time.Millisecond, Heartbeat: 20 * time.Millisecond,
		Logger: slog.New(logs)})
	send := func(q string) *errand.AsyncResult {
		sig := errand.NewSignature("tag", q)
		sig.RoutingKey = q
		r, err := e.srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	begin := time.Now()
	var rs []*errand.AsyncResult
	for range 50 {
		rs = append(rs, send("busy"))
	}
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("50 tasks of the busy queue took %v beside an empty queue with Concurrency 1", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, err := e.srv.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ws, func(wi errand.WorkerInfo) bool { return wi.ID == w.ID() })
		if i >= 0 && slices.Equal(ws[i].Queues, []string{"empty", "busy"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Server.Workers does not list the worker with both queues, highest weight first: %+v", ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.srv.Pause(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	// Wait until the worker has seen the pause (its poller logs it).
	for deadline := time.Now().Add(5 * time.Second); ; {
		if m := logs.find("errand: queue paused: not fetching"); m != nil && m["queue"] == "empty" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never reported the queue paused (no \"queue paused\" log line within 5s of Server.Pause)")
		}
		time.Sleep(time.Millisecond)
	}
	paused := send("empty")
	if _, err := send("busy").Get(ctx); err != nil {
		t.Fatalf("the busy queue stopped while the other was paused: %v", err)
	}
	if st, err := paused.State(ctx); err != nil || st.State != errand.StatePending {
		t.Errorf("a task of the paused queue is %+v, %v; want PENDING", st, err)
	}
	if err := e.srv.Resume(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	if _, err := paused.Get(ctx); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

// slowFetch is the memory broker whose fetches of some queues take
// longer (a round trip on the synctest bubble's clock).
type slowFetch struct {
	*memorybroker.Broker
	delay map[string]time.Duration
}

func (b *slowFetch) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	time.Sleep(b.delay[queue])
	return b.Broker.Fetch(ctx, queue, limit, lease)
}

// The weights hold whatever the fetches' round trips: a worker on two
// queues weighted 3:1 whose heavier queue's fetches take 300ms and the
// other's none starts 3:1 of a backlog on both (to within the four slots),
// because a slot picked for the slow queue waits for its fetch rather than
// going to the fast one. (Before internal/dispatch, the dispatcher waited
// at most 100ms, and the fast queue took nearly every slot.)
func TestWorkerQueuesWeightsHoldWithSlowFetches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 400
		br := &slowFetch{Broker: memorybroker.New(nil), delay: map[string]time.Duration{"high": 300 * time.Millisecond}}
		be := memorybackend.New(nil)
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var started []string
		full := make(chan struct{})
		srv.Register("tag", func(q string) error {
			mu.Lock()
			defer mu.Unlock()
			if started = append(started, q); len(started) == n {
				close(full)
			}
			return nil
		})
		ctx := context.Background()
		for _, q := range []string{"low", "high"} {
			var batch []driver.Message
			for range n {
				sig := errand.NewSignature("tag", q)
				sig.RoutingKey = q
				body, err := errand.EncodeSignature(sig)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, driver.Message{ID: sig.UUID, Queue: q, Body: body})
			}
			if err := br.Publish(ctx, batch...); err != nil {
				t.Fatal(err)
			}
		}
		w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{"high": 3, "low": 1}, Concurrency: 4, PausePoll: -1, Heartbeat: -1})
		w.Start()
		<-full
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		srv.Close()
		br.Close()
		be.Close()
		mu.Lock()
		defer mu.Unlock()
		hi := 0
		for _, q := range started[:n] {
			if q == "high" {
				hi++
			}
		}
		if hi < 300-4 || hi > 300+4 {
			t.Errorf("queue weights promise broken: with the high queue's fetches taking 300ms and the low one's none, of the first %d tasks started %d were high and %d low; want 300 ± 4 (3:1, to within the slots)", n, hi, n-hi)
		}
	})
}

// A worker on one queue with a cap below Concurrency fetches only for the
// free slots within its cap (the one-queue fetch loop, design.md: no
// prefetch beyond free slots). Before the one fetch loop, a cap sent such
// a worker through the several-queue dispatch, whose fetch asks for its
// share plus one: 4 in flight for 3 running.
func TestWorkerQueuesOneCappedQueueFetchesOnlyFreeSlots(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	var cur, peak atomic.Int32
	release := make(chan struct{})
	e.srv.Register("hold", func() error {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		cur.Add(-1)
		return nil
	})
	ctx := ctxT(t)
	var rs []*errand.AsyncResult
	for range 10 {
		sig := errand.NewSignature("hold")
		sig.RoutingKey = "capped"
		r, err := e.srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	e.start(t, errand.WorkerConfig{Queues: map[string]int{"capped": 1}, QueueConcurrency: map[string]int{"capped": 3}, Concurrency: 10})
	waitFor(t, "3 tasks running", func() bool { return cur.Load() == 3 })
	qi, err := e.srv.Queue(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if st := qi.Stats; st.InFlight != 3 || st.Pending != 7 {
		t.Errorf("a worker on one queue capped at 3 (Concurrency 10), its 3 slots busy, leaves the queue %+v; want 3 in flight and 7 pending (no prefetch beyond free slots)", st)
	}
	close(release)
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != 3 {
		t.Errorf("peak concurrency of the queue capped at 3 = %d, want 3", p)
	}
}

// releaseCounter is the memory broker counting the deliveries given back
// (Release).
type releaseCounter struct {
	*memorybroker.Broker
	released atomic.Int32
}

func (b *releaseCounter) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	b.released.Add(1)
	return b.Broker.Release(ctx, d, notBefore)
}

// A worker on one queue whose every slot is busy when the queue is paused
// fetches nothing when a slot frees: the fetch loop waiting for a slot
// sees the pause. Before the one fetch loop, the single-queue loop took
// the freed slot, fetched, found the queue paused and gave the delivery
// back (Release: on Redis, to the tail of the queue; on a broker counting
// deliveries, one delivery more).
func TestWorkerQueuesOneQueuePausedWhileBusyFetchesNothing(t *testing.T) {
	checkNoLeak(t)
	br := &releaseCounter{Broker: memorybroker.New(nil)}
	be := memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); br.Close(); be.Close() })
	running := make(chan struct{})
	release := make(chan struct{})
	srv.Register("hold", func() error {
		close(running)
		<-release
		return nil
	})
	srv.Register("quick", func() error { return nil })
	ctx := ctxT(t)
	logs := &attrRecorder{}
	w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{"q": 1}, Concurrency: 1, PausePoll: 5 * time.Millisecond, Heartbeat: -1,
		Logger: slog.New(logs)})
	w.Start()
	t.Cleanup(func() {
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
	})
	send := func(name string) *errand.AsyncResult {
		sig := errand.NewSignature(name)
		sig.RoutingKey = "q"
		r, err := srv.SendTask(ctx, sig)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	held := send("hold")
	<-running
	quick := send("quick")
	if err := srv.Pause(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, `the worker's "queue paused" log line`, func() bool { return logs.find("errand: queue paused: not fetching") != nil })
	close(release)
	if _, err := held.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Resume(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := quick.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if n := br.released.Load(); n != 0 {
		t.Errorf("pause promise broken: a worker on one queue, its one slot busy when the queue was paused, gave back %d deliveries: it fetched when the slot freed although the queue was paused; want none (a paused queue is not fetched)", n)
	}
}

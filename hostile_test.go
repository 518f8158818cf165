package errand_test

// Issue 15, items 2, 4, 5 and the consumer half of 7: messages written
// straight onto a queue (by another application, by hand, by an attacker)
// and deliveries the worker must not run as they are.

import (
	"context"
	"errors"
	"fmt"
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

// publishRaw records sig PENDING and puts its encoding on queue straight
// through the driver, as a producer that is not errand's Server would
// (nothing is filled in: no RoutingKey, no Attempt).
func publishRaw(t *testing.T, ctx context.Context, srv *errand.Server, br errand.Broker, be errand.Backend, queue string, sig *errand.Signature) *errand.AsyncResult {
	t.Helper()
	body, err := errand.EncodeSignature(sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := setState(ctx, be, &errand.TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: errand.StatePending, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := br.Publish(ctx, errand.Message{ID: sig.UUID, Queue: queue, Body: body}); err != nil {
		t.Fatal(err)
	}
	return srv.Result(sig.UUID)
}

// recvOr waits for a value on ch or fails t with msg once ctx ends.
func recvOr[T any](t *testing.T, ctx context.Context, ch <-chan T, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatal(msg)
		var zero T
		return zero
	}
}

// TestNoRoutingKeyStaysOnTheDeliveryQueue (item 4): a task sent without a
// RoutingKey, straight onto queue "orders", is retried on "orders" and its
// OnSuccess callback (no RoutingKey either) runs there too, instead of both
// landing on queue "" where no worker reads.
func TestNoRoutingKeyStaysOnTheDeliveryQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		const q = "orders"
		e.srv.Register("flaky", func(ctx context.Context) (string, error) {
			if ti, _ := errand.TaskInfoFrom(ctx); ti.Attempt == 1 {
				return "", errors.New("transient")
			}
			return "ok", nil
		})
		got := make(chan string, 2)
		e.srv.Register("after", func(tag, res string) error { got <- tag + " " + res; return nil })
		e.start(t, errand.WorkerConfig{Queues: map[string]int{q: 1}})
		ctx := ctxT(t)
		sig := &errand.Signature{UUID: errand.NewUUID(), Name: "flaky", RetryCount: 2,
			OnSuccess: []*errand.Signature{{UUID: errand.NewUUID(), Name: "after", Args: []errand.Arg{errand.ArgOf("callback")}}}}
		r := publishRaw(t, ctx, e.srv, e.broker, e.rec, q, sig)
		var out string
		if err := r.GetInto(ctx, &out); err != nil || out != "ok" {
			pending, _ := listed(context.Background(), e.broker, "", driver.ListPending)
			delayed, _ := listed(context.Background(), e.broker, "", driver.ListScheduled)
			t.Fatalf("routing promise broken: a task sent to %q without a RoutingKey ended %q, %v; want its retry on %q (queue \"\" holds %d pending, %d delayed)", q, out, err, q, len(pending), len(delayed))
		}
		if m := recvOr(t, ctx, got, "routing promise broken: the OnSuccess callback without a RoutingKey never ran on the parent's queue"); m != "callback ok" {
			t.Fatalf("callback got %q, want %q", m, "callback ok")
		}
	})
}

// TestUnknownTaskPassedOnBetweenApplications (item 5): two applications
// share one broker, backend and queue, each worker knowing only its own
// task. A worker given the other application's task gives it back instead
// of failing it for good, so all 200 tasks succeed.
func TestUnknownTaskPassedOnBetweenApplications(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := memorybroker.New(nil)
		be := memorybackend.New(nil)
		defer br.Close()
		defer be.Close()
		var srvs [2]*errand.Server
		var ws [2]*errand.Worker
		for i, app := range []string{"a", "b"} {
			srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			srv.Register(app+".add", func(x, y int) (int, error) { return x + y, nil })
			// With random delivery between two workers a task meets the wrong
			// one k times in a row with probability 2^-k: 40 makes losing one of
			// 200 tasks a 1e-10 event (the default, 10, is for rolling deploys;
			// see docs/concepts.md).
			ws[i] = srv.NewWorker(errand.WorkerConfig{Concurrency: 10, UnknownTaskAttempts: 40, ErrorBackoff: 100 * time.Millisecond, MaxErrorBackoff: time.Second})
			ws[i].Start()
			srvs[i] = srv
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // fake time
		defer cancel()
		var rs []*errand.AsyncResult
		for i := range 100 {
			for k, app := range []string{"a", "b"} {
				r, err := srvs[k].SendTask(ctx, errand.NewSignature(app+".add", i, k))
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
		}
		failed := 0
		for _, r := range rs {
			var sum int
			if err := r.GetInto(ctx, &sum); err != nil {
				failed++
				if failed <= 3 {
					t.Errorf("unknown task promise broken: %s ended %v; the worker without the function must give it back", r.Signature.Name, err)
				}
			}
		}
		if failed > 0 {
			t.Fatalf("unknown task promise broken: %d of 200 tasks of two applications sharing a queue failed, want 0", failed)
		}
		for _, w := range ws {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := w.Shutdown(sctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			cancel()
		}
	})
}

// deliveryCounter counts the deliveries of each message ID and lets a test
// override Extend.
type deliveryCounter struct {
	*memorybroker.Broker
	mu     sync.Mutex
	counts map[string][]int // message ID -> Delivery.Attempt of each delivery
	extend func(ctx context.Context, d *driver.Delivery, lease time.Duration) error
}

func newDeliveryCounter(b *memorybroker.Broker) *deliveryCounter {
	return &deliveryCounter{Broker: b, counts: map[string][]int{}}
}

func (b *deliveryCounter) Fetch(ctx context.Context, q string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	ds, err := b.Broker.Fetch(ctx, q, limit, lease)
	b.mu.Lock()
	for _, d := range ds {
		b.counts[d.ID] = append(b.counts[d.ID], d.Attempt)
	}
	b.mu.Unlock()
	return ds, err
}

func (b *deliveryCounter) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if b.extend != nil {
		return b.extend(ctx, d, lease)
	}
	return b.Broker.Extend(ctx, d, lease)
}

func (b *deliveryCounter) deliveries(id string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.counts[id]...)
}

// TestUnknownTaskFailsAtTheBound (item 5): with no worker knowing the name,
// the task is given back UnknownTaskAttempts-1 times, recording nothing,
// then fails with ErrUnknownTask and is archived with the reason.
func TestUnknownTaskFailsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		cb := newDeliveryCounter(e.broker)
		srv, _ := errand.NewServer(errand.Config{Broker: cb, Backend: e.rec})
		w := srv.NewWorker(errand.WorkerConfig{UnknownTaskAttempts: 3, ErrorBackoff: time.Second})
		w.Start()
		defer w.Shutdown(context.Background())
		ctx := ctxT(t)
		start := time.Now()
		r, err := srv.SendTask(ctx, errand.NewSignature("no.such.task", 1))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Get(ctx)
		if !isTaskFailure(err) || !strings.Contains(err.Error(), "unknown task") || !strings.Contains(err.Error(), `"no.such.task"`) {
			t.Fatalf("unknown task promise broken: Get = %v, want FAILURE naming the task and ErrUnknownTask", err)
		}
		if got := fmt.Sprint(cb.deliveries(r.Signature.UUID)); got != "[1 2 3]" {
			t.Errorf("unknown task promise broken: delivered with attempts %s, want [1 2 3] (given back twice, failed on the third)", got)
		}
		// Equal jitter: each give-back waits at least half its step (1s, 2s).
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Errorf("unknown task promise broken: failed %v after sending; the give-backs must back off (at least 1.5s with ErrorBackoff 1s)", took)
		}
		if p := fmt.Sprint(e.rec.path(r.Signature.UUID)); p != "[PENDING RECEIVED FAILURE]" {
			t.Errorf("states promise broken: path %s, want [PENDING RECEIVED FAILURE] (nothing recorded while the task is given back)", p)
		}
		var dl []errand.QueuedTask
		waitFor(t, "the unknown task in the archive", func() bool {
			dl, _ = e.srv.List(ctx, errand.DefaultQueue, errand.ListArchived, 0, 10)
			return len(dl) == 1
		})
		if dl[0].ID != r.Signature.UUID || !strings.Contains(dl[0].Archive.Reason+": "+dl[0].Archive.Error, "unknown task") {
			t.Fatalf("unknown task promise broken: archived %+v, want the task with an 'unknown task' reason", dl[0].Archive)
		}
	})
}

// TestRedeliveryOfStartedTaskStillRuns (item 2, the other side): a worker
// whose lease ran out mid-task (STARTED recorded, it looks crashed) does not
// block its task: the broker's redelivery (Attempt 2) to another worker runs
// it, unlike a second message carrying the same UUID.
func TestRedeliveryOfStartedTaskStillRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		stuck := newDeliveryCounter(e.broker)
		stuck.extend = func(context.Context, *driver.Delivery, time.Duration) error { return nil } // lease never renewed
		var runs atomic.Int32
		started := make(chan struct{})
		hold := func(ctx context.Context) (string, error) {
			if runs.Add(1) == 1 {
				close(started)
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "second worker", nil
		}
		srv1, _ := errand.NewServer(errand.Config{Broker: stuck, Backend: e.rec})
		srv1.Register("hold", hold)
		w1 := srv1.NewWorker(errand.WorkerConfig{Lease: time.Second})
		w1.Start()
		ctx := ctxT(t)
		r, _ := srv1.SendTask(ctx, errand.NewSignature("hold"))
		<-started
		e.srv.Register("hold", hold)
		e.start(t, errand.WorkerConfig{})
		var out string
		if err := r.GetInto(ctx, &out); err != nil || out != "second worker" {
			t.Fatalf("at-least-once promise broken: a STARTED task whose lease ran out ended %q, %v; want the broker's redelivery run by the second worker", out, err)
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		w1.Shutdown(sctx)
	})
}

// TestOversizedDeliverySetAside (item 7, consumer side): a delivery larger
// than MaxMessageSize is rejected with the reason and never decoded: its
// task does not run, and the worker goes on.
func TestOversizedDeliverySetAside(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  memorybroker.Options
		cfg   errand.WorkerConfig
		limit int
	}{
		{"configured", memorybroker.Options{}, errand.WorkerConfig{MaxMessageSize: 1024}, 1024},
		{"default from the broker's MaxPayload", memorybroker.Options{MaxPayload: 4096}, errand.WorkerConfig{}, 4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			br := memorybroker.New(&c.opts)
			be := memorybackend.New(nil)
			defer be.Close()
			defer br.Close()
			srv, _ := errand.NewServer(errand.Config{Broker: br, Backend: be})
			var runs atomic.Int32
			srv.Register("echo", func(s string) (int, error) { runs.Add(1); return len(s), nil })
			w := srv.NewWorker(errand.WorkerConfig{MaxMessageSize: c.cfg.MaxMessageSize})
			w.Start()
			defer w.Shutdown(context.Background())
			ctx := ctxT(t)
			big := errand.NewSignature("echo", strings.Repeat("x", c.limit))
			big.RoutingKey = errand.DefaultQueue
			publishRaw(t, ctx, srv, br, be, errand.DefaultQueue, big) // straight to the driver: no producer check
			var n int
			small, err := srv.SendTask(ctx, errand.NewSignature("echo", "ok"))
			if err != nil {
				t.Fatal(err)
			}
			if err := small.GetInto(ctx, &n); err != nil || n != 2 {
				t.Fatalf("bad input promise broken: the worker did not go on after an oversized message: %d, %v", n, err)
			}
			var dl []errand.QueuedTask
			waitFor(t, "the oversized message in the archive", func() bool {
				dl, _ = srv.List(ctx, errand.DefaultQueue, errand.ListArchived, 0, 10)
				return len(dl) == 1
			})
			reason := dl[0].Archive.Reason + ": " + dl[0].Archive.Error
			if !strings.Contains(reason, fmt.Sprint(c.limit)) || !strings.Contains(reason, "MaxMessageSize") {
				t.Errorf("bad input promise broken: reason %q does not name the size bound %d (MaxMessageSize)", reason, c.limit)
			}
			if k := runs.Load(); k != 1 {
				t.Errorf("bad input promise broken: the echo task ran %d times, want once (the oversized message must never be decoded or run)", k)
			}
			if st, err := be.GetState(ctx, big.UUID); err != nil || st.State != errand.StatePending {
				t.Errorf("bad input promise broken: the oversized task's state is %v, %v; want PENDING untouched", st, err)
			}
		})
	}
}

// TestStraysNeverMoveTheChordCallback (issue 31, item 7): messages that
// name a chord's callback without being members of its group leave the
// callback PENDING while the members run, however they name the group:
//
//   - unmade-group: a task naming a group the backend never had; with no
//     group to ask, nothing proves it a member, and the callback, still
//     PENDING, cannot have lost its group to expiry (a group outlives its
//     callback's PENDING): reported with ErrGroupNotFound, the callback
//     left alone;
//   - self-callback: the callback's own signature copied into the group
//     (GroupUUID, ChordCallback naming itself): refused by SendTask, and
//     set aside unrun with ErrUUIDConflict when it arrives by another
//     producer.
//
// Released, the members then fire the callback once, with their results.
func TestStraysNeverMoveTheChordCallback(t *testing.T) {
	for _, form := range []string{"unmade-group", "self-callback"} {
		t.Run(form, func(t *testing.T) {
			e := newEnv(t)
			release := make(chan struct{})
			started := make(chan struct{}, 3)
			e.srv.Register("hold", func(ctx context.Context, s string) (string, error) {
				started <- struct{}{}
				select {
				case <-release:
					return s, nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			})
			e.srv.Register("stray", func() (string, error) { return "stray", nil })
			var calls atomic.Int32
			e.srv.Register("gather", func(xs ...string) (string, error) { calls.Add(1); return strings.Join(xs, ","), nil })
			var mu sync.Mutex
			var reports []error
			e.start(t, errand.WorkerConfig{Concurrency: 4, ErrorHandler: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, err)
			}})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock) // before the worker's shutdown
			ctx := ctxT(t)
			g, _ := errand.NewGroup(errand.NewSignature("hold", "a"), errand.NewSignature("hold", "b"), errand.NewSignature("hold", "c"))
			ch, _ := errand.NewChord(g, errand.NewSignature("gather"))
			r, err := e.srv.SendChord(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				recvOr(t, ctx, started, "the chord's 3 members did not all start")
			}
			var want error
			var stray *errand.AsyncResult
			switch form {
			case "unmade-group":
				s := errand.NewSignature("stray")
				s.GroupUUID, s.GroupTaskCount, s.ChordCallback = errand.NewUUID(), 3, ch.Callback.Copy()
				if stray, err = e.srv.SendTask(ctx, s); err != nil {
					t.Fatal(err)
				}
				want = driver.ErrGroupNotFound
			case "self-callback":
				s := ch.Callback.Copy()
				s.GroupUUID, s.GroupTaskCount, s.ChordCallback = g.GroupUUID, 3, ch.Callback.Copy()
				if _, err := e.srv.SendTask(ctx, s.Copy()); !errors.Is(err, errand.ErrUUIDConflict) {
					t.Fatalf("SendTask of a chord callback's signature naming itself as its chord callback returned %v; want an error wrapping ErrUUIDConflict, nothing sent", err)
				}
				body, err := errand.EncodeSignature(s)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.broker.Publish(ctx, errand.Message{ID: s.UUID, Queue: errand.DefaultQueue, Body: body}); err != nil {
					t.Fatal(err)
				}
				want = errand.ErrUUIDConflict
			}
			waitFor(t, "the stray reported with "+want.Error(), func() bool {
				if st, err := e.rec.GetState(ctx, ch.Callback.UUID); err != nil || st.State != errand.StatePending {
					return true // moved: said below
				}
				mu.Lock()
				defer mu.Unlock()
				for _, err := range reports {
					if errors.Is(err, want) {
						return true
					}
				}
				return false
			})
			if stray != nil {
				var out string
				if err := stray.GetInto(ctx, &out); err != nil || out != "stray" {
					t.Fatalf("the stray's own result is %q, %v; want it recorded like any task's", out, err)
				}
			}
			if st, err := e.rec.GetState(ctx, ch.Callback.UUID); err != nil || st.State != errand.StatePending {
				t.Fatalf("stray promise broken (%s): the chord callback is %v, %v while its 3 members still run; want PENDING: a message that is not a member never moves its chord's callback", form, st, err)
			}
			unblock()
			var got string
			if err := r.Callback.GetInto(ctx, &got); err != nil || got != "a,b,c" {
				t.Fatalf("after its members finished the chord callback ended %q, %v; want %q, their results in group order", got, err, "a,b,c")
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("the chord callback ran %d times; want once", n)
			}
		})
	}
}

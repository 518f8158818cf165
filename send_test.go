package errand

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// carrier is a memory broker that carries the PENDING writes of one memory
// backend (driver.PendingCarrier), as the Redis broker carries the Redis
// backend's on one Redis: a call writes the states where absent, then
// publishes. It counts its calls and their sizes, and its own Publish
// calls; each call waits for gate when gate is set.
type carrier struct {
	*memorybroker.Broker
	server *memorybackend.Backend // the backend whose writes it carries
	gate   chan struct{}
	fail   error // a call with fail set publishes nothing and returns it

	mu        sync.Mutex
	sizes     []int
	publishes atomic.Int64
}

func (c *carrier) Publish(ctx context.Context, msgs ...driver.Message) error {
	c.publishes.Add(1)
	return c.Broker.Publish(ctx, msgs...)
}

func (c *carrier) CarryPending(be driver.Backend) driver.PublishPendingFunc {
	if be != driver.Backend(c.server) {
		return nil
	}
	return func(ctx context.Context, sts []*TaskState, msgs []Message) (bool, error) {
		c.mu.Lock()
		c.sizes = append(c.sizes, len(msgs))
		c.mu.Unlock()
		if c.gate != nil {
			select {
			case <-c.gate:
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		if c.fail != nil {
			return false, c.fail
		}
		if err := c.server.SetPendingIfAbsent(ctx, sts); err != nil {
			return false, err
		}
		return true, c.Broker.Publish(ctx, msgs...)
	}
}

func (c *carrier) calls() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...)
}

// noPending hides the memory backend's driver.PendingWriter (and every
// other optional ability).
type noPending struct{ driver.Backend }

func newCarried(t *testing.T) (*Server, *carrier) {
	t.Helper()
	be := memorybackend.New(nil)
	br := &carrier{Broker: memorybroker.New(nil), server: be}
	srv, err := NewServer(Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, br
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSendTaskCarriedPending: where the broker carries the backend's
// PENDING writes (driver.PendingCarrier), SendTask under a UUID errand
// made costs one call of the carrier, with no Publish or backend call of
// its own, and the task is PENDING when SendTask returns. Under the
// caller's UUID it takes the two-call path (PENDING, then Publish).
func TestSendTaskCarriedPending(t *testing.T) {
	srv, br := newCarried(t)
	ctx := testCtx(t)
	for i := range 3 {
		r, err := srv.SendTask(ctx, NewSignature("add", i, 1))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := r.State(ctx); err != nil || st.State != StatePending {
			t.Fatalf("after a carried SendTask the task's state is %+v, %v; want PENDING", st, err)
		}
	}
	if got := br.calls(); len(got) != 3 || br.publishes.Load() != 0 {
		t.Fatalf("3 sequential SendTask calls made carrier calls of sizes %v and %d Publish calls; want 3 calls of 1 message and no Publish (PENDING rides with the publish)", got, br.publishes.Load())
	}

	sig := NewSignature("add", 1, 2)
	sig.UUID = NewUUID()
	if _, err := srv.SendTask(ctx, sig); err != nil {
		t.Fatal(err)
	}
	if got := br.calls(); len(got) != 3 || br.publishes.Load() != 1 {
		t.Fatalf("SendTask under the caller's UUID: carrier calls %v, Publish calls %d; want no carrier call and one Publish (PENDING is written first, a state may exist under a chosen UUID)", got, br.publishes.Load())
	}
	if n, err := br.Broker.Stats(ctx, DefaultQueue); err != nil || n.Pending != 4 {
		t.Fatalf("queue after 4 sends: %+v, %v; want 4 pending messages", n, err)
	}
}

// TestSendTaskCarrierRefused: a carrier that does not recognise the
// backend (CarryPending returns nil) leaves SendTask on the path the
// backend allows: PENDING beside the publish, or before it.
func TestSendTaskCarrierRefused(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		be   driver.Backend
	}{
		{"PendingWriter", memorybackend.New(nil)},
		{"plain backend", noPending{memorybackend.New(nil)}},
	} {
		br := &carrier{Broker: memorybroker.New(nil), server: memorybackend.New(nil)}
		srv, err := NewServer(Config{Broker: br, Backend: tc.be})
		if err != nil {
			t.Fatal(err)
		}
		r, err := srv.SendTask(ctx, NewSignature("add", 1, 2))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := r.State(ctx); err != nil || st.State != StatePending {
			t.Fatalf("%s: state %+v, %v; want PENDING", tc.name, st, err)
		}
		if len(br.calls()) != 0 || br.publishes.Load() != 1 {
			t.Fatalf("%s: a carrier that refused the backend was called %v, Publish %d times; want no carrier call, one Publish", tc.name, br.calls(), br.publishes.Load())
		}
		srv.Close()
	}
}

// TestSendTaskCarriedConcurrent: concurrent SendTask calls share carrier
// calls: with sendFlights calls held in flight, the sends that arrive
// meanwhile go in one call when the first flight returns; every task is
// published once and PENDING.
func TestSendTaskCarriedConcurrent(t *testing.T) {
	srv, br := newCarried(t)
	br.gate = make(chan struct{})
	ctx := testCtx(t)
	const n = 50
	results := make([]*AsyncResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := srv.SendTask(ctx, NewSignature("add", i, 1))
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		})
	}
	// Hold the first flights until every other send has queued.
	deadline := time.Now().Add(10 * time.Second)
	for srv.fresh.queued() < n-sendFlights {
		if time.Now().After(deadline) {
			t.Fatalf("%d sends queued behind %d flights after 10s; want %d", srv.fresh.queued(), sendFlights, n-sendFlights)
		}
		time.Sleep(time.Millisecond)
	}
	close(br.gate)
	wg.Wait()
	sizes := br.calls()
	total := 0
	for _, s := range sizes {
		total += s
	}
	if total != n || len(sizes) > sendFlights+1 {
		t.Fatalf("%d concurrent SendTask calls made carrier calls of sizes %v; want %d messages in at most %d calls (the flights, then one call of everything queued)", n, sizes, n, sendFlights+1)
	}
	for i, r := range results {
		if r == nil {
			continue
		}
		if st, err := r.State(ctx); err != nil || st.State != StatePending {
			t.Fatalf("task %d after a joined send: %+v, %v; want PENDING", i, st, err)
		}
	}
	if s, err := br.Broker.Stats(ctx, DefaultQueue); err != nil || s.Pending != n {
		t.Fatalf("queue after %d sends: %+v, %v; want %d pending messages, each once", n, s, err, n)
	}
}

// TestSendTaskCarrierFails: a carrier call that fails unpublished fails
// SendTask with its error and frees the task's unique key; a closed server
// answers ErrClosed without calling the carrier.
func TestSendTaskCarrierFails(t *testing.T) {
	srv, br := newCarried(t)
	ctx := testCtx(t)
	boom := errors.New("boom")
	br.fail = boom
	sig := NewSignature("add", 1, 2)
	sig.UniqueKey, sig.UniqueFor = "k", time.Minute
	if _, err := srv.SendTask(ctx, sig); !errors.Is(err, boom) {
		t.Fatalf("SendTask over a failing carrier: %v; want its error", err)
	}
	br.fail = nil
	again := NewSignature("add", 1, 2)
	again.UniqueKey, again.UniqueFor = "k", time.Minute
	if _, err := srv.SendTask(ctx, again); err != nil {
		t.Fatalf("SendTask after a failed unpublished send of the same unique key: %v; want the key freed", err)
	}
	calls := len(br.calls())
	srv.Close()
	if _, err := srv.SendTask(ctx, NewSignature("add", 1, 2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("SendTask after Close: %v; want ErrClosed", err)
	}
	if len(br.calls()) != calls {
		t.Fatalf("SendTask after Close reached the carrier")
	}
}

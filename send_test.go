package errand

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/uuid"
)

// carrier is a memory broker co-located with one backend
// (driver.Colocator), as the Redis broker is with the Redis backend on one
// Redis: a Send writes the states where absent into the memory backend
// behind it, then publishes; its FetchStart starts nothing, its Settle
// writes then acks. It counts its Send calls and their sizes, and its own
// Publish calls; each Send takes a value from gate when gate is set (close
// it to let every call through).
type carrier struct {
	*memorybroker.Broker
	server driver.Backend         // the backend it is co-located with
	mem    *memorybackend.Backend // where server keeps its states
	gate   chan struct{}
	fail   error // a call with fail set publishes nothing and returns it
	// statesErr: a call publishes, then returns it as the states' error.
	statesErr error

	mu        sync.Mutex
	sizes     []int
	publishes atomic.Int64
}

func (c *carrier) Publish(ctx context.Context, msgs ...driver.Message) error {
	c.publishes.Add(1)
	return c.Broker.Publish(ctx, msgs...)
}

func (c *carrier) Colocate(be driver.Backend) driver.Colocation {
	if be != c.server {
		return nil
	}
	return carrierColocation{c}
}

type carrierColocation struct{ c *carrier }

func (cc carrierColocation) Send(ctx context.Context, sts []*TaskState, msgs []Message) (bool, error) {
	c := cc.c
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
	if c.statesErr == nil {
		for _, err := range c.mem.SetPendingIfAbsent(ctx, sts) {
			if err != nil {
				return false, err
			}
		}
	}
	if err := c.Broker.Publish(ctx, msgs...); err != nil {
		return false, err
	}
	return true, c.statesErr
}

func (cc carrierColocation) FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, _ []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	ds, err := cc.c.Broker.Fetch(ctx, queue, limit, lease)
	return ds, nil, time.Time{}, err
}

func (cc carrierColocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*TaskState) []error {
	if err := errors.Join(cc.c.mem.SetStates(ctx, sts)...); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return cc.c.Broker.Ack(ctx, ds)
}

func (c *carrier) calls() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...)
}

// noPending hides the memory backend's driver.PendingWriter (and every
// other optional capability).
type noPending struct{ driver.Backend }

// countedBackend is a memory backend that counts its state writes.
type countedBackend struct {
	*memorybackend.Backend
	writes atomic.Int64
}

func (b *countedBackend) SetStates(ctx context.Context, sts []*TaskState) []error {
	b.writes.Add(1)
	return b.Backend.SetStates(ctx, sts)
}

func (b *countedBackend) SetPendingIfAbsent(ctx context.Context, sts []*TaskState) []error {
	b.writes.Add(1)
	return b.Backend.SetPendingIfAbsent(ctx, sts)
}

func newCarried(t *testing.T) (*Server, *carrier, *countedBackend) {
	t.Helper()
	be := &countedBackend{Backend: memorybackend.New(nil)}
	br := &carrier{Broker: memorybroker.New(nil), server: be, mem: be.Backend}
	srv, err := NewServer(Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, br, be
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
	srv, br, be := newCarried(t)
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
	if got := br.calls(); len(got) != 3 || br.publishes.Load() != 0 || be.writes.Load() != 0 {
		t.Fatalf("3 sequential SendTask calls made carrier calls of sizes %v, %d Publish calls and %d backend writes; want 3 calls of 1 message, no Publish and no backend write (PENDING rides with the publish)", got, br.publishes.Load(), be.writes.Load())
	}

	sig := NewSignature("add", 1, 2)
	sig.UUID = uuid.New()
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
		other := memorybackend.New(nil)
		br := &carrier{Broker: memorybroker.New(nil), server: other, mem: other}
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
	srv, br, _ := newCarried(t)
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
	waitFor(t, fmt.Sprintf("%d sends to queue behind %d flights", n-sendFlights, sendFlights), func() bool { return srv.coloc.sends.Queued() == n-sendFlights })
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
	srv, br, _ := newCarried(t)
	ctx := testCtx(t)
	boom := errors.New("boom")
	br.fail = boom
	sig := uniqueSig("k", 1, 2)
	if _, err := srv.SendTask(ctx, sig); !errors.Is(err, boom) {
		t.Fatalf("SendTask over a failing carrier: %v; want its error", err)
	}
	br.fail = nil
	again := uniqueSig("k", 1, 2)
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

// TestSendTaskCarriedStatesFail: a carried call that published but could
// not record the states fails SendTask with the states' error and keeps
// the task's unique key: the task is queued.
func TestSendTaskCarriedStatesFail(t *testing.T) {
	srv, br, _ := newCarried(t)
	ctx := testCtx(t)
	boom := errors.New("states refused")
	br.statesErr = boom
	sig := uniqueSig("k", 1, 2)
	if _, err := srv.SendTask(ctx, sig); !errors.Is(err, boom) {
		t.Fatalf("SendTask whose states failed after the publish: %v; want the states' error", err)
	}
	br.statesErr = nil
	again := uniqueSig("k", 1, 2)
	if _, err := srv.SendTask(ctx, again); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("a second send of unique key k after a published send: %v; want ErrDuplicate (the first task is queued and holds the key)", err)
	}
	if s, err := br.Broker.Stats(ctx, DefaultQueue); err != nil || s.Pending != 1 {
		t.Fatalf("queue: %+v, %v; want the one published task", s, err)
	}
}

// TestSendTaskGivesUpInJoinedCall: a caller whose ctx ends while its send
// is in a joined call that goes on for the other sends of the call learns
// that call's outcome: the task was published, SendTask succeeds and the
// unique key stays held. A caller who gives up while still queued
// withdraws its send: it is never published.
func TestSendTaskGivesUpInJoinedCall(t *testing.T) {
	srv, br, _ := newCarried(t)
	br.gate = make(chan struct{})
	ctx := testCtx(t)
	var flights sync.WaitGroup
	for i := range sendFlights {
		flights.Go(func() {
			if _, err := srv.SendTask(ctx, NewSignature("add", i, 1)); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "the flights to be in the carrier", func() bool { return len(br.calls()) == sendFlights })

	// Two sends queue behind the flights; a third queues and gives up.
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	type outcome struct {
		r   *AsyncResult
		err error
	}
	a, b := make(chan outcome, 1), make(chan outcome, 1)
	go func() {
		sig := uniqueSig("a", 100, 1)
		r, err := srv.SendTask(actx, sig)
		a <- outcome{r, err}
	}()
	go func() {
		r, err := srv.SendTask(ctx, NewSignature("add", 200, 1))
		b <- outcome{r, err}
	}()
	waitFor(t, "two sends to queue", func() bool { return srv.coloc.sends.Queued() == 2 })
	qctx, cancelQ := context.WithCancel(ctx)
	q := make(chan error, 1)
	go func() {
		_, err := srv.SendTask(qctx, NewSignature("add", 300, 1))
		q <- err
	}()
	waitFor(t, "a third send to queue", func() bool { return srv.coloc.sends.Queued() == 3 })
	cancelQ()
	if err := <-q; !errors.Is(err, context.Canceled) {
		t.Fatalf("a send withdrawn while queued: %v; want context.Canceled", err)
	}

	// One flight returns and takes the two queued sends into one call,
	// which the carrier holds; then A gives up.
	br.gate <- struct{}{}
	waitFor(t, "the joined call to reach the carrier", func() bool { return len(br.calls()) == sendFlights+1 })
	cancelA()
	close(br.gate)
	flights.Wait()
	if o := <-a; o.err != nil {
		t.Fatalf("a send whose caller gave up inside a joined call that published it: %v; want success (the task is queued)", o.err)
	}
	if o := <-b; o.err != nil {
		t.Fatal(o.err)
	}
	if got := br.calls(); got[sendFlights] != 2 {
		t.Fatalf("carrier calls %v; want the two queued sends joined in call %d", got, sendFlights+1)
	}
	sig := uniqueSig("a", 1, 1)
	if _, err := srv.SendTask(ctx, sig); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("unique key of a send published after its caller gave up: %v; want ErrDuplicate (the key stays held by the queued task)", err)
	}
	if s, err := br.Broker.Stats(ctx, DefaultQueue); err != nil || s.Pending != sendFlights+2 {
		t.Fatalf("queue: %+v, %v; want %d tasks (the flights and the joined call; not the withdrawn send)", s, err, sendFlights+2)
	}
}

// waitFor polls cond until it holds, failing t after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// uniqueSig is an "add" task of a and b under unique key key, held a minute.
func uniqueSig(key string, a, b int) *Signature {
	sig := NewSignature("add", a, b)
	sig.UniqueKey, sig.UniqueFor = key, time.Minute
	return sig
}

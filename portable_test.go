package errand_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// The portable layer's promises, whatever the driver: closed and ctx
// checks, ctx errors kept, payload limits, ack batching, redacted open
// errors that still unwrap, and no group metadata for plain groups.

// countingBroker counts the calls that reach the driver.
type countingBroker struct {
	*memorybroker.Broker
	publishes atomic.Int32
	publish   func(ctx context.Context, msgs ...driver.Message) error // nil: the memory broker's
}

func (b *countingBroker) Publish(ctx context.Context, msgs ...driver.Message) error {
	b.publishes.Add(1)
	if b.publish != nil {
		return b.publish(ctx, msgs...)
	}
	return b.Broker.Publish(ctx, msgs...)
}

func TestClosedServerAnswersErrClosed(t *testing.T) {
	ctx := ctxT(t)
	drv := &countingBroker{Broker: memorybroker.New(nil)}
	srv, err := errand.NewServer(errand.Config{Broker: drv, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil (the driver is closed once)", err)
	}
	if _, err := srv.SendTask(ctx, errand.NewSignature("add", 1, 2)); !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("SendTask after Close = %v, want ErrClosed", err)
	}
	if _, err := errand.PortableBroker(srv).Fetch(ctx, "q", 1, time.Second); !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("Fetch after Close = %v, want ErrClosed", err)
	}
	if _, err := srv.Queues(ctx); !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("Queues after Close = %v, want ErrClosed (an optional capability's call is checked as every call)", err)
	}
	if errs := srv.Broker().Ack(ctx, []*driver.Delivery{{}, {}}); len(errs) != 2 || !errors.Is(errs[0], errand.ErrClosed) || !errors.Is(errs[1], errand.ErrClosed) {
		t.Fatalf("Ack of two deliveries after Close = %v, want ErrClosed for each", errs)
	}
	if n := drv.publishes.Load(); n != 0 {
		t.Fatalf("%d Publish calls reached a closed driver; want none", n)
	}
}

func TestDoneCtxNeverReachesTheDriver(t *testing.T) {
	drv := &countingBroker{Broker: memorybroker.New(nil)}
	srv, _ := errand.NewServer(errand.Config{Broker: drv, Backend: memorybackend.New(nil)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := errand.PortableBroker(srv).Publish(ctx, errand.Message{ID: "m", Queue: "q", Body: []byte("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish with a cancelled ctx = %v, want context.Canceled", err)
	}
	if n := drv.publishes.Load(); n != 0 {
		t.Fatalf("a call with a done ctx reached the driver %d times", n)
	}
}

// A driver that reports its own error when the caller's ctx ran out still
// yields an error satisfying errors.Is(err, context.DeadlineExceeded).
func TestCtxErrorKeptWhateverTheDriverWraps(t *testing.T) {
	drv := &countingBroker{Broker: memorybroker.New(nil)}
	drv.publish = func(ctx context.Context, _ ...driver.Message) error {
		<-ctx.Done()
		return errors.New("i/o timeout") // drops the ctx error, as some clients do
	}
	srv, _ := errand.NewServer(errand.Config{Broker: drv, Backend: memorybackend.New(nil)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "i/o timeout") {
		t.Fatalf("SendTask past its deadline = %v, want context.DeadlineExceeded keeping the driver's text", err)
	}
}

func TestPublishBatchRefusedWholeOverLimit(t *testing.T) {
	ctx := ctxT(t)
	drv := &countingBroker{Broker: memorybroker.New(&memorybroker.Options{MaxPayload: 16})}
	srv, _ := errand.NewServer(errand.Config{Broker: drv, Backend: memorybackend.New(nil)})
	err := errand.PortableBroker(srv).Publish(ctx,
		errand.Message{ID: "small", Queue: "q", Body: []byte("x")},
		errand.Message{ID: "big", Queue: "q", Body: []byte(strings.Repeat("x", 17))})
	var pe *errand.PayloadError
	if !errors.As(err, &pe) || pe.Size != 17 || pe.Limit != 16 {
		t.Fatalf("Publish over the limit = %v, want a *PayloadError (17 > 16)", err)
	}
	if n := drv.publishes.Load(); n != 0 {
		t.Fatalf("a batch with an oversized message reached the driver; nothing may be sent")
	}
}

var errFake = errors.New("fake dial failure")

func init() {
	driver.RegisterBroker("errandtest", func(_ context.Context, u *url.URL) (driver.Broker, error) {
		// Like many clients, the error repeats the URL, secrets and all.
		return nil, fmt.Errorf("dial %s: %w", u.String(), errFake)
	})
}

func TestOpenErrorRedactsAndUnwraps(t *testing.T) {
	_, err := errand.OpenBroker(context.Background(), "errandtest://alice:hunter2@host:1/0?token=s3cr3t&x=1")
	if err == nil {
		t.Fatal("OpenBroker succeeded; the fake driver always fails")
	}
	if s := err.Error(); strings.Contains(s, "hunter2") || strings.Contains(s, "s3cr3t") {
		t.Fatalf("open error %q shows a secret of the URL", s)
	}
	if !errors.Is(err, errFake) {
		t.Fatalf("open error %v does not satisfy errors.Is(err, the driver's error)", err)
	}
	var oe *errand.OpenError
	if !errors.As(err, &oe) || oe.Kind != "broker" || strings.Contains(oe.URL, "hunter2") {
		t.Fatalf("open error %v: want an *OpenError of kind broker with the URL redacted", err)
	}
}

// groupCounter counts InitGroup calls.
type groupCounter struct {
	errand.Backend
	inits atomic.Int32
}

func (g *groupCounter) InitGroup(ctx context.Context, id string, ids []string) error {
	g.inits.Add(1)
	return g.Backend.InitGroup(ctx, id, ids)
}

func TestPlainGroupWritesNoMetadata(t *testing.T) {
	ctx := ctxT(t)
	be := &groupCounter{Backend: memorybackend.New(nil)}
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: be})
	srv.Register("add", add)
	w := srv.NewWorker(errand.WorkerConfig{})
	w.Start()
	defer w.Shutdown(ctx)
	g, _ := errand.NewGroup(errand.NewSignature("add", 1, 2), errand.NewSignature("add", 3, 4))
	rs, err := srv.SendGroup(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := be.inits.Load(); n != 0 {
		t.Fatalf("a plain group wrote its metadata %d times; nothing reads it", n)
	}
	g2, _ := errand.NewGroup(errand.NewSignature("add", 1, 2))
	c, _ := errand.NewChord(g2, errand.NewSignature("add", 10))
	r, err := srv.SendChord(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var sum int
	if err := r.GetInto(ctx, &sum); err != nil || sum != 13 {
		t.Fatalf("chord = %d, %v; want 13", sum, err)
	}
	if n := be.inits.Load(); n != 1 {
		t.Fatalf("a chord wrote its group metadata %d times, want 1", n)
	}
}

// These test drivers wrap the memory drivers to count or hold their calls,
// which the memory drivers' co-location (driver.Colocator) would bypass:
// they declare none, so errand takes the portable path through them.
func (b *countingBroker) Colocate(driver.Backend) driver.Colocation { return nil }
func (b *failingPublish) Colocate(driver.Backend) driver.Colocation { return nil }
func (b *slowBroker) Colocate(driver.Backend) driver.Colocation     { return nil }
func (b *gatedBroker) Colocate(driver.Backend) driver.Colocation    { return nil }
func (c *callCounter) Location() any                                { return nil }

package errand_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// plainBroker hides every optional capability of the memory broker (no
// driver.Uniquer, no driver.RateLimiter).
type plainBroker struct{ driver.Broker }

func flowServer(t *testing.T, b errand.Broker) *errand.Server {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func uniqueSig(key string) *errand.Signature {
	sig := errand.NewSignature("t")
	sig.UniqueKey, sig.UniqueFor = key, time.Minute
	return sig
}

// A UniqueKey errand cannot keep is refused before anything is sent.
func TestUniqueRefusedWhereItCannotHold(t *testing.T) {
	ctx := context.Background()
	srv := flowServer(t, memorybroker.New(nil))
	noTTL := errand.NewSignature("t")
	noTTL.UniqueKey = "k"
	if _, err := srv.SendTask(ctx, noTTL); err == nil || !strings.Contains(err.Error(), "UniqueFor") {
		t.Errorf("SendTask with a UniqueKey and no UniqueFor: %v, want an error naming UniqueFor", err)
	}
	g, _ := errand.NewGroup(errand.NewSignature("t"), uniqueSig("k"))
	if _, err := srv.SendGroup(ctx, g); err == nil || !strings.Contains(err.Error(), "UniqueKey") {
		t.Errorf("SendGroup with a unique member: %v, want an error naming UniqueKey", err)
	}
	g2, _ := errand.NewGroup(errand.NewSignature("t"))
	c, _ := errand.NewChord(g2, uniqueSig("k"))
	if _, err := srv.SendChord(ctx, c); err == nil || !strings.Contains(err.Error(), "UniqueKey") {
		t.Errorf("SendChord with a unique callback: %v, want an error naming UniqueKey", err)
	}
	ch, _ := errand.NewChain(errand.NewSignature("t"), uniqueSig("k"))
	if _, err := srv.SendChain(ctx, ch); err == nil || !strings.Contains(err.Error(), "UniqueKey") {
		t.Errorf("SendChain with a unique later task: %v, want an error naming UniqueKey", err)
	}
	head := uniqueSig("chain-head")
	ch2, _ := errand.NewChain(head, errand.NewSignature("t"))
	if _, err := srv.SendChain(ctx, ch2); err != nil {
		t.Errorf("SendChain with a unique first task: %v", err)
	}
	if _, err := srv.SendTask(ctx, uniqueSig("chain-head")); !errors.Is(err, errand.ErrDuplicate) {
		t.Errorf("a send of the chain head's key: %v, want ErrDuplicate", err)
	}
	withCallback := uniqueSig("cb")
	withCallback.OnSuccess = []*errand.Signature{uniqueSig("cb2")}
	if _, err := srv.SendTask(ctx, withCallback); err == nil || !strings.Contains(err.Error(), "UniqueKey") {
		t.Errorf("SendTask with a unique callback: %v, want an error naming UniqueKey", err)
	}

	plain := flowServer(t, plainBroker{memorybroker.New(nil)})
	if _, err := plain.SendTask(ctx, uniqueSig("k")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SendTask with a UniqueKey on a broker without driver.Uniquer: %v, want errors.ErrUnsupported", err)
	}
	if err := plain.Register("limited", func() error { return nil }, errand.WithRateLimit(10, 1)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Register WithRateLimit on a broker without driver.RateLimiter: %v, want errors.ErrUnsupported", err)
	}
	if err := srv.Register("limited", func() error { return nil }, errand.WithRateLimit(0, 1)); err == nil {
		t.Errorf("Register WithRateLimit(0, 1): nil error, want a refused rate")
	}
}

// failingPublish fails its first n Publish calls.
type failingPublish struct {
	*memorybroker.Broker
	n atomic.Int32
}

func (b *failingPublish) Publish(ctx context.Context, msgs ...driver.Message) error {
	if b.n.Add(-1) >= 0 {
		return errors.New("publish failed on purpose")
	}
	return b.Broker.Publish(ctx, msgs...)
}

// A send that fails after taking its key frees it again.
func TestUniqueFreedWhenSendFails(t *testing.T) {
	ctx := context.Background()
	b := &failingPublish{Broker: memorybroker.New(nil)}
	b.n.Store(1)
	srv := flowServer(t, b)
	if _, err := srv.SendTask(ctx, uniqueSig("k")); err == nil || errors.Is(err, errand.ErrDuplicate) {
		t.Fatalf("first send: %v, want the publish error", err)
	}
	if _, err := srv.SendTask(ctx, uniqueSig("k")); err != nil {
		t.Fatalf("a send after a failed send of the same key: %v, want it sent (the failed send frees its key)", err)
	}
}

// A second send of a unique key, refused while the first task is queued.
func ExampleDuplicateError() {
	ctx := context.Background()
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	first := errand.NewSignature("send_report", "acme")
	first.UUID = "3b1f0c52-0000-4000-8000-000000000001"
	first.UniqueKey, first.UniqueFor = "report:acme", time.Hour
	srv.SendTask(ctx, first)

	again := errand.NewSignature("send_report", "acme")
	again.UniqueKey, again.UniqueFor = "report:acme", time.Hour
	_, err := srv.SendTask(ctx, again)
	var dup *errand.DuplicateError
	fmt.Println(errors.Is(err, errand.ErrDuplicate), errors.As(err, &dup) && dup.ID == first.UUID)
	fmt.Println(err)
	// Output:
	// true true
	// errand: duplicate task: unique key "report:acme" is held by task 3b1f0c52-0000-4000-8000-000000000001
}

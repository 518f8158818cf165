package sqsbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/driver"
)

var errInjected = errors.New("injected SendMessageBatch failure")

// TestHopResendFailureKeepsMessage: a message with a delay beyond MaxHop
// arrives early and is sent on (a hop); when that send fails, the received
// copy must not be deleted nor left invisible for the whole lease: it is
// released for a short backoff, the failure is reported by Fetch, and the
// message is still delivered, once, at or after its time.
func TestHopResendFailureKeepsMessage(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), scaled(40*time.Second))
	defer cancel()
	var armed atomic.Bool
	var failed atomic.Int32
	fc := awssqs.New(c.Options(), intercept(func(params any) error {
		if _, ok := params.(*awssqs.SendMessageBatchInput); ok && armed.CompareAndSwap(true, false) {
			failed.Add(1)
			return errInjected
		}
		return nil
	}))
	prefix := "errand-test-hop-" + rand.Text()[:8] + "-"
	t.Cleanup(func() { deletePrefix(c, prefix) })
	b := sqsbroker.New(fc, &sqsbroker.Options{QueuePrefix: prefix, MaxHop: time.Second})
	defer b.Close()

	id := rand.Text()
	notBefore := time.Now().Add(4 * time.Second)
	if err := b.Publish(ctx, driver.Message{ID: id, Queue: "q", Body: []byte(`{"hop":1}`), NotBefore: notBefore}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	armed.Store(true) // the next send, the hop's, fails

	const lease = time.Minute // a message left invisible for the lease would miss the deadline
	var reported error
	var got *driver.Delivery
	deadline := time.Now().Add(scaled(20 * time.Second))
	for got == nil && time.Now().Before(deadline) {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := b.Fetch(fctx, "q", 1, lease)
		fcancel()
		switch {
		case err != nil && errors.Is(err, errInjected):
			reported = err
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Fetch: %v", err)
		case len(ds) > 0:
			got = ds[0]
		}
	}
	const promise = "delay promise broken (hop re-send failed)"
	if failed.Load() != 1 {
		t.Fatalf("test setup: the hop's SendMessageBatch was failed %d times, want 1 (did the message hop?)", failed.Load())
	}
	if got == nil {
		t.Fatalf("%s: message %s not delivered within %v of its time: the received copy was deleted or left invisible for the lease (%v)", promise, id, time.Until(deadline)+scaled(20*time.Second)-4*time.Second, lease)
	}
	if now := time.Now(); got.ID != id || now.Before(notBefore) {
		t.Fatalf("%s: delivered %q at %v, want %q at or after %v", promise, got.ID, now.Format(time.StampMilli), id, notBefore.Format(time.StampMilli))
	}
	if reported == nil {
		t.Errorf("%s: the failed re-send was never reported by Fetch", promise)
	} else if !strings.Contains(reported.Error(), id) {
		t.Errorf("%s: Fetch's error does not name the message %s: %v", promise, id, reported)
	}
	if err := errors.Join(b.Ack(ctx, []*driver.Delivery{got})...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	// Nothing else: the failed hop left no second copy.
	fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
	defer fcancel()
	if ds, err := b.Fetch(fctx, "q", 10, lease); len(ds) > 0 {
		t.Errorf("%s: a second copy of %s delivered after the ack: %q (%v)", promise, id, ds[0].ID, err)
	}
}

package memorybroker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

func msg(id string, notBefore time.Time) errand.Message {
	return errand.Message{ID: id, Queue: "q", Body: []byte(id), NotBefore: notBefore}
}

func TestDelayNeverEarlyAndInETAOrder(t *testing.T) {
	b := memorybroker.New(nil)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	etas := map[string]time.Time{"c": now.Add(60 * time.Millisecond), "a": now.Add(20 * time.Millisecond), "b": now.Add(40 * time.Millisecond)}
	for id, eta := range etas {
		if err := b.Publish(ctx, msg(id, eta)); err != nil {
			t.Fatal(err)
		}
	}
	var order string
	for range 3 {
		ds, err := b.Fetch(ctx, "q", 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := time.Now()
		id := ds[0].ID
		if got.Before(etas[id]) {
			t.Fatalf("delay promise broken: %s delivered %v before its ETA", id, etas[id].Sub(got))
		}
		order += id
		b.Ack(ctx, ds[:1])
	}
	if order != "abc" {
		t.Fatalf("delivery order %q, want by ETA: abc", order)
	}
}

func TestReleaseNotBeforeAndPriority(t *testing.T) {
	b := memorybroker.New(nil)
	defer b.Close()
	ctx := context.Background()
	b.Publish(ctx, errand.Message{ID: "low", Queue: "q", Body: []byte("x")}, errand.Message{ID: "high", Queue: "q", Body: []byte("x"), Priority: 9})
	ds, _ := b.Fetch(ctx, "q", 2, time.Minute)
	if len(ds) != 2 || ds[0].ID != "high" {
		t.Fatalf("fetched %v, want high priority first", ids(ds))
	}
	nb := time.Now().Add(30 * time.Millisecond)
	if err := b.Release(ctx, ds[0], nb); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, ds[1], time.Time{}); err != nil {
		t.Fatal(err)
	}
	if errs := b.Ack(ctx, ds[:1]); len(errs) != 1 || !errors.Is(errs[0], driver.ErrLeaseLost) {
		t.Fatalf("ack after release = %v, want [ErrLeaseLost]", errs)
	}
	d1, _ := b.Fetch(ctx, "q", 1, time.Minute)
	d2, _ := b.Fetch(ctx, "q", 1, time.Minute)
	if d1[0].ID != "low" || d2[0].ID != "high" || time.Now().Before(nb) {
		t.Fatalf("after release got %s then %s at %v; want low at once, high not before its not-before time", d1[0].ID, d2[0].ID, time.Until(nb))
	}
	if d2[0].Attempt != 2 {
		t.Fatalf("redelivery attempt = %d, want 2", d2[0].Attempt)
	}
}

func TestListPurgeStatsArchive(t *testing.T) {
	b := memorybroker.New(nil)
	defer b.Close()
	ctx := context.Background()
	b.Publish(ctx, msg("now1", time.Time{}), msg("now2", time.Time{}), msg("later", time.Now().Add(time.Hour)))
	ds, _ := b.Fetch(ctx, "q", 1, time.Minute)
	b.Reject(ctx, ds[0], "bad body")
	pending, err := b.List(ctx, "q", driver.ListPending, 0, 10)
	if err != nil || len(pending) != 1 {
		t.Fatalf("List(pending) = %v, %v; want now2", pending, err)
	}
	delayed, err := b.List(ctx, "q", driver.ListScheduled, 0, 10)
	if err != nil || len(delayed) != 1 || delayed[0].ID != "later" {
		t.Fatalf("List(scheduled) = %v, %v; want later", delayed, err)
	}
	dl, _ := b.Archived(ctx, "q", 0, 10)
	if len(dl) != 1 || dl[0].ID != "now1" || dl[0].Reason != "bad body" {
		t.Fatalf("Archived = %+v; want now1, rejected with its reason", dl)
	}
	st, _ := b.Stats(ctx, "q")
	if st != (driver.QueueStats{Pending: 1, Delayed: 1, Dead: 1}) {
		t.Fatalf("Stats = %+v", st)
	}
	if n, err := b.Purge(ctx, "q"); n != 2 || err != nil {
		t.Fatalf("Purge = %d, %v; want 2", n, err)
	}
}

func TestFetchHonoursCtxAndClose(t *testing.T) {
	b := memorybroker.New(&memorybroker.Options{MaxPayload: 4})
	if l := b.Limits(); l.MaxPayload != 4 {
		t.Fatalf("Limits().MaxPayload = %d, want the configured 4 (errand refuses larger bodies before Publish)", l.MaxPayload)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Fetch(ctx, "q", 1, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch on empty queue = %v, want the ctx error", err)
	}
	done := make(chan error)
	go func() {
		_, err := b.Fetch(context.Background(), "q", 1, time.Second)
		done <- err
	}()
	b.Close()
	if err := <-done; !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("blocked Fetch after Close = %v, want ErrClosed", err)
	}
	if err := b.Publish(context.Background(), msg("x", time.Time{})); !errors.Is(err, errand.ErrClosed) {
		t.Fatalf("Publish after Close = %v, want ErrClosed", err)
	}
}

func ids(ds []*driver.Delivery) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprint(d.ID, " ")
	}
	return s
}

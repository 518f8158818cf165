package amqpbroker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/driver"
)

// TestWorkerStartsPaused: a worker whose Broker has never seen its queue
// starts while another process has paused it: its first Paused cannot
// list the queue, but the first Fetch checks the queue's marker and waits,
// so the task sent while paused runs only after Resume.
func TestWorkerStartsPaused(t *testing.T) {
	u := amqpURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := amqpbroker.Options{QueuePrefix: fmt.Sprintf("errand-test-pause.%d.", time.Now().UnixNano())}
	operator := amqpbroker.New(u, &opts)
	be := memorybackend.New(nil)
	opSrv, err := errand.NewServer(errand.Config{Broker: operator, Backend: be, DefaultQueue: "work"})
	if err != nil {
		t.Fatal(err)
	}
	defer opSrv.Close()
	const q = "work"
	if err := operator.Pause(ctx, q); err != nil {
		t.Fatal(err)
	}
	defer operator.Resume(context.Background(), q)

	// The worker's process: a Broker of its own, which knows no queue
	// (the task is sent by the operator's), so the poller's first Paused
	// cannot list q.
	wb := amqpbroker.New(u, &opts)
	srv, err := errand.NewServer(errand.Config{Broker: wb, Backend: be, DefaultQueue: q})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ran := make(chan string, 4)
	if err := srv.Register("echo", func(s string) (string, error) { ran <- s; return s, nil }); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{q: 1}, PausePoll: 100 * time.Millisecond})
	w.Start()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		w.Shutdown(sctx)
	}()
	r, err := opSrv.SendTask(ctx, errand.NewSignature("echo", "while paused"))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing may run for several polls: time passing is the event.
	select {
	case s := <-ran:
		t.Fatalf("task %q ran while its queue was paused (the worker started on the paused queue)", s)
	case <-time.After(time.Second):
	}
	if ps, err := wb.Paused(ctx); err != nil || !slices.Contains(ps, q) {
		t.Errorf("the worker's Broker: Paused = %v, %v; want %s listed once it fetched from it", ps, err, q)
	}
	if err := operator.Resume(ctx, q); err != nil {
		t.Fatal(err)
	}
	var out string
	if err := r.GetInto(ctx, &out); err != nil || out != "while paused" {
		t.Fatalf("after Resume the task ended %q, %v; want it to run", out, err)
	}
}

// TestArchiveBrowse: browsing gives every entry back in its place (the
// archive is a classic queue), an ID archived again replaces its older
// entry, and what RabbitMQ dead-lettered itself is listed with its
// x-death reason.
func TestArchiveBrowse(t *testing.T) {
	u := amqpURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("errand-test-archive.%d.", time.Now().UnixNano())
	b := amqpbroker.New(u, &amqpbroker.Options{QueuePrefix: prefix})
	defer b.Close()
	const q = "arch"
	archive := func(id string, reason string) {
		t.Helper()
		if err := b.Publish(ctx, errand.Message{ID: id, Queue: q, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		ds, err := b.Fetch(ctx, q, 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("fetch %s: %v, %v", id, ds, err)
		}
		if err := b.Archive(ctx, ds[0], driver.ArchiveEntry{Reason: reason, Attempts: 1}, driver.Retention{}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		t.Helper()
		es, err := b.Archived(ctx, q, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.ID+"/"+e.Reason)
		}
		return out
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		archive(id, "first")
	}
	want := []string{"d/first", "c/first", "b/first", "a/first"}
	for range 3 { // browsing again and again keeps the order
		if got := ids(); !slices.Equal(got, want) {
			t.Fatalf("Archived = %v, want %v (newest first, the same after every browse)", got, want)
		}
	}
	archive("b", "again")
	if got, want := ids(), []string{"b/again", "d/first", "c/first", "a/first"}; !slices.Equal(got, want) {
		t.Fatalf("after archiving b again, Archived = %v, want %v (the new entry replaces the old)", got, want)
	}

	// A message RabbitMQ dead-letters itself: an operator's reject
	// without requeue, through the queue's x-dead-letter-exchange.
	c, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const q2 = "arch2" // a queue b does not consume
	if err := b.Publish(ctx, errand.Message{ID: "foreign", Queue: q2, Body: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get(prefix+q2, false)
	if err != nil || !ok {
		t.Fatalf("basic.get: %v, %v", ok, err)
	}
	if err := m.Reject(false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err := b.ArchivedEntry(ctx, q2, "foreign")
		if err == nil {
			if e.Reason != "dead-lettered by RabbitMQ: rejected" {
				t.Errorf("a message RabbitMQ dead-lettered: Reason %q, want its x-death reason", e.Reason)
			}
			break
		}
		if !errors.Is(err, driver.ErrNotArchived) || time.Now().After(deadline) {
			t.Fatalf("ArchivedEntry(foreign) = %v; want the message RabbitMQ dead-lettered", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

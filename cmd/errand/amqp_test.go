package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// TestAMQPBroker: the command on an amqp:// broker (ERRAND_AMQP_URL) with
// the Redis backend: what the AMQP broker declares (stats, purge, the
// archive, pause) works, and what it cannot do (listing queues, pending
// tasks or workers) fails with one clear line saying the broker does not
// support it.
func TestAMQPBroker(t *testing.T) {
	t.Parallel()
	raw := os.Getenv("ERRAND_AMQP_URL")
	if raw == "" {
		needServices(t, "ERRAND_AMQP_URL is not set")
	}
	backendURL := os.Getenv("ERRAND_REDIS_URL")
	if backendURL == "" {
		needServices(t, "ERRAND_REDIS_URL is not set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("prefix", fmt.Sprintf("errand-test-cli.%d.", time.Now().UnixNano()))
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	broker, err := errand.OpenBroker(ctx, u.String())
	if err != nil {
		needServices(t, "RabbitMQ at %s is unreachable: %v", errand.RedactURL(raw), err)
	}
	backend, err := errand.OpenBackend(ctx, backendURL)
	if err != nil {
		needServices(t, "Redis is unreachable: %v", err)
	}
	// The worker logs when its poller sees the pause: the event the pause
	// test below waits for.
	queue := queueName(t)
	seen := &pauseSeen{queue: queue, ch: make(chan struct{})}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend, Logger: slog.New(seen)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	d := &deployment{t: t, kind: "amqp", srv: srv, url: u.String(), queue: queue,
		env: map[string]string{"ERRAND_BACKEND_URL": backendURL}}
	d.send("add", 0, 1, 2)
	d.send("add", 0, 3, 4)
	d.send("add", time.Hour, 5, 6)

	var st queueJSON
	d.json(&st, "stats", d.queue)
	if st != (queueJSON{Name: d.queue, Pending: 2, Delayed: 1}) {
		t.Errorf("stats %s -o json on amqp://: want pending 2, delayed 1, got %+v", d.queue, st)
	}
	r := d.ok("purge", "-q", d.queue, "--yes")
	if !strings.Contains(r.stdout, "dropped 3") {
		t.Errorf("purge --yes on amqp://: want dropped 3, got:\n%s", r)
	}
	d.json(&st, "stats", d.queue)
	if st != (queueJSON{Name: d.queue}) {
		t.Errorf("stats after purge: want nothing left, got %+v", st)
	}
	for _, args := range [][]string{{"queues"}, {"ls", "-q", d.queue, "pending"}, {"workers"}} {
		d.fails(1, []string{"does not support"}, args...)
	}

	// The archive: NAME.dead, browsed.
	d.worker(map[string]any{"fail": failing, "add": func(a, b int) (int, error) { return a + b, nil }})
	a, b, c := d.send("fail", 0), d.send("fail", 0), d.send("fail", 0)
	d.archived(a, b, c)
	r = d.ok("ls", "archived", "-q", d.queue)
	for _, id := range []string{a, b, c} {
		if !strings.Contains(r.stdout, id) {
			t.Errorf("ls archived -q %s on amqp://: want %s listed, got:\n%s", d.queue, id, r)
		}
	}
	r = d.ok("show", a, "-q", d.queue)
	for _, want := range []string{a, "archived", "boom:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show %s -q %s on amqp://: want %q in it, got:\n%s", a, d.queue, want, r)
		}
	}
	r = d.ok("delete", a, "-q", d.queue)
	if !strings.Contains(r.stdout, "deleted "+a) {
		t.Errorf("delete %s on amqp://: want it named as deleted, got:\n%s", a, r)
	}
	r = d.ok("requeue", b, "-q", d.queue)
	if !strings.Contains(r.stdout, "requeued 1 archived tasks") {
		t.Errorf("requeue %s on amqp://: want a count of 1, got:\n%s", b, r)
	}
	d.fails(1, []string{"not in the archive"}, "requeue", a, "-q", d.queue)
	// Without -q the command would look for the task in every queue, which
	// AMQP cannot list: show gives the backend's record alone.
	if r := d.ok("show", c); !strings.Contains(r.stdout, "no list of the queue holds it") || !strings.Contains(r.stdout, "FAILURE") {
		t.Errorf("show %s without -q on amqp://: want the backend's record and no list, got:\n%s", c, r)
	}
	// requeue without -q acts on the default queue, where c is not.
	d.fails(1, []string{"not in the archive of queue"}, "requeue", c)
	d.archived(b, c) // b failed again, for good
	if got := d.list(errand.ListArchived); len(got) != 2 || !slices.Contains(got, b) || !slices.Contains(got, c) {
		t.Errorf("after delete %s and requeue %s (which fails again): want %s and %s archived, got %v", a, b, b, c, got)
	}

	// Pause: a marker queue NAME.paused, seen by the worker's poller.
	r = d.ok("pause", d.queue)
	if !strings.Contains(r.stdout, "paused queue") {
		t.Errorf("pause on amqp://: want it to say so, got:\n%s", r)
	}
	if ps, err := srv.Paused(ctx); err != nil || !slices.Contains(ps, d.queue) {
		t.Fatalf("after pause %s: want Paused to list it, got %v, %v", d.queue, ps, err)
	}
	// The worker polls every 20 ms: once it logged the pause, a task sent
	// then waits.
	select {
	case <-seen.ch:
	case <-ctx.Done():
		t.Fatal("the worker did not see the pause")
	}
	id := d.send("add", 0, 20, 22)
	time.Sleep(300 * time.Millisecond)
	if st, err := backend.GetState(ctx, id); err != nil || st.State != errand.StatePending {
		t.Errorf("a task sent to a paused queue is %+v, %v; want PENDING", st, err)
	}
	d.ok("resume", d.queue)
	if st := d.state(id, errand.StateSuccess); string(st.Results[0].Value) != "42" {
		t.Errorf("task sent while paused: want 42 after resume, got %+v", st.Results)
	}
}

// pauseSeen is a slog.Handler that closes ch when the worker logs that it
// saw queue paused.
type pauseSeen struct {
	queue string
	once  sync.Once
	ch    chan struct{}
}

func (h *pauseSeen) Enabled(context.Context, slog.Level) bool { return true }

func (h *pauseSeen) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "errand: queue paused: not fetching" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "queue" && a.Value.String() == h.queue {
			h.once.Do(func() { close(h.ch) })
			return false
		}
		return true
	})
	return nil
}

func (h *pauseSeen) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *pauseSeen) WithGroup(string) slog.Handler      { return h }

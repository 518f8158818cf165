package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// TestAMQPBroker: the command on an amqp:// broker (ERRAND_AMQP_URL) with
// the Redis backend: what the AMQP broker declares (stats, purge) works,
// and what it cannot do (listing queues or tasks, pausing) fails with one
// clear line saying the broker does not support it.
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
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	d := &deployment{t: t, kind: "amqp", srv: srv, url: u.String(), queue: queueName(t),
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
	for _, args := range [][]string{{"queues"}, {"ls", "-q", d.queue, "pending"}, {"pause", d.queue}, {"ls", "-q", d.queue, "archived"}} {
		d.fails(1, []string{"does not support"}, args...)
	}
}

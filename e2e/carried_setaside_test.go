package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestCarriedStartSetAsideRestored: a message the worker sets aside
// without decoding it (over its MaxMessageSize) after the carried fetch
// recorded its task STARTED leaves the task's state as it was (PENDING):
// it never ran, and a STARTED left behind would make the message's
// re-drive from the archive (a first delivery of a new message) a
// "second message under a running UUID", set aside again.
func TestCarriedStartSetAsideRestored(t *testing.T) {
	t.Parallel()
	c, ok := redisDeployments(t)["Single"]
	if !ok {
		t.Fatal("no single Redis server (ERRAND_REDIS_URL)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("errand-e2e-aside-%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(c.rdb, prefix) })
	srv, err := errand.NewServer(errand.Config{
		Broker:       redisbroker.New(c.rdb, &redisbroker.Options{Prefix: prefix}),
		Backend:      redisbackend.New(c.rdb, &redisbackend.Options{Prefix: prefix, ResultExpiry: 5 * time.Minute}),
		DefaultQueue: "q",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Register("echo", func(s string) (int, error) { return len(s), nil }); err != nil {
		t.Fatal(err)
	}
	big, err := srv.SendTask(ctx, errand.NewSignature("echo", strings.Repeat("x", 2048)))
	if err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{MaxMessageSize: 1024, Concurrency: 1})
	w.Start()
	defer w.Shutdown(context.Background())
	small, err := srv.SendTask(ctx, errand.NewSignature("echo", "ok"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := small.GetInto(ctx, &n); err != nil || n != 2 {
		t.Fatalf("echo ok: %d, %v; want 2", n, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		dl, err := srv.List(ctx, "q", errand.ListArchived, 0, 10)
		if err == nil && len(dl) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the oversized message never reached the archive: %v, %v", dl, err)
		}
		time.Sleep(20 * time.Millisecond) // poll
	}
	st, err := big.State(ctx)
	if err != nil || st.State != errand.StatePending {
		t.Fatalf("the oversized task's state after it was set aside undecoded: %+v, %v; want PENDING as before its fetch", st, err)
	}
}

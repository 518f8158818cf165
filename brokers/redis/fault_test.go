package redisbroker_test

// Fault tests with real processes: a worker process SIGKILLed mid-task, and
// redis-server restarted under running workers. Nothing may be lost.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

// The test binary doubles as the worker process of TestWorkerKilledMidTask:
// with ERRAND_FAULT_QUEUE set it runs a worker until killed.
func TestMain(m *testing.M) {
	if q := os.Getenv("ERRAND_FAULT_QUEUE"); q != "" {
		os.Exit(faultWorker(q, os.Getenv("ERRAND_FAULT_HANG") == "1"))
	}
	os.Exit(m.Run())
}

// faultWorker consumes q; each task adds its argument to the set q:started,
// then (unless hang) to q:done. With hang, tasks block until the process is
// killed.
func faultWorker(q string, hang bool) int {
	o, err := goredis.ParseURL(os.Getenv("ERRAND_REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := goredis.NewClient(o)
	srv, _ := errand.NewServer(errand.Config{Broker: redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test"}), Backend: memorybackend.New(nil), DefaultQueue: q})
	srv.Register("mark", func(ctx context.Context, id string) error {
		rdb.SAdd(ctx, q+":started", id)
		if hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return rdb.SAdd(ctx, q+":done", id).Err()
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, Lease: time.Second})
	w.Run(context.Background()) // until killed
	return 0
}

func singleServer(t *testing.T) goredis.UniversalClient {
	for name, c := range servers(t) {
		if name == "Single" {
			return c
		}
	}
	t.Fatal("no single-node server")
	return nil
}

// waitCount polls SCARD key until it reaches n or the deadline passes.
func waitCount(t *testing.T, rdb goredis.UniversalClient, key string, n int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		got, err := rdb.SCard(context.Background(), key).Result()
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("at-least-once promise broken: %s holds %d of %d after %v", key, got, n, within)
		}
	}
}

func TestWorkerKilledMidTask(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q := "fault-kill-" + errand.NewUUID()
	producer, _ := errand.NewServer(errand.Config{Broker: redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test"}), Backend: memorybackend.New(nil), DefaultQueue: q})
	const n = 40
	for i := range n {
		if _, err := producer.SendTask(ctx, errand.NewSignature("mark", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	worker := func(hang bool) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "ERRAND_FAULT_QUEUE="+q)
		if hang {
			cmd.Env = append(cmd.Env, "ERRAND_FAULT_HANG=1")
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	// The first worker takes 4 tasks and is SIGKILLed while running them.
	a := worker(true)
	waitCount(t, rdb, q+":started", 4, 20*time.Second)
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.Wait()
	if d, _ := rdb.SCard(ctx, q+":done").Result(); d != 0 {
		t.Fatalf("the hanging worker finished %d tasks; the test needs them unfinished", d)
	}
	// A second worker must complete every task, the killed worker's included.
	b := worker(false)
	defer func() { b.Process.Kill(); b.Wait() }()
	waitCount(t, rdb, q+":done", n, 30*time.Second)
}

// TestRedisRestartUnderLoad restarts a dedicated redis-server (AOF on) while
// workers run; they reconnect and every task completes.
func TestRedisRestartUnderLoad(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		conformance.ServiceUnavailable(t, "redis-server not installed (scripts/services start installs it)")
	}
	port := freePort(t)
	dir := t.TempDir()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	server := start()
	defer func() { server.Process.Kill(); server.Wait() }()
	rdb := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: 3})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitUp(t, ctx, rdb)

	srv, _ := errand.NewServer(errand.Config{Broker: redisbroker.New(rdb, nil), Backend: memorybackend.New(nil)})
	release := make(chan struct{})
	srv.Register("slow", func(ctx context.Context, i int) (int, error) {
		<-release
		return i * 2, nil
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, Lease: 2 * time.Second, ErrorBackoff: 50 * time.Millisecond})
	w.Start()
	defer w.Shutdown(context.Background())
	const n = 30
	var rs []*errand.AsyncResult
	for i := range n {
		r, err := srv.SendTask(ctx, errand.NewSignature("slow", i))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	// Stop the server (SIGTERM: it flushes the AOF) while tasks are in flight, then start it again.
	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	server.Wait()
	server = start()
	waitUp(t, ctx, rdb)
	close(release)
	for i, r := range rs {
		var got int
		if err := r.GetInto(ctx, &got); err != nil || got != 2*i {
			t.Fatalf("after a redis-server restart task %d ended %d, %v; want %d", i, got, err, 2*i)
		}
	}
}

func waitUp(t *testing.T, ctx context.Context, rdb *goredis.Client) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if rdb.Ping(ctx).Err() == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("redis-server did not come up")
		case <-tick.C:
		}
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

package e2e_test

// Issue 14: the result backend stopped under load. 200 tasks on 10 worker
// slots (memory broker); once 50 have run, the backend's private server is
// stopped for 10 s (ERRAND_OUTAGE overrides, e.g. ERRAND_OUTAGE=3s) and
// started again. Every task must end SUCCESS, and a task may run twice
// only in the window docs/reliability.md gives: its function finished
// while the backend was down, so SUCCESS could not be recorded and the
// delivery was requeued (at most one task per worker slot).

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	gomongo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand"
	mongobackend "github.com/errand-go/errand/backends/mongo"
	redisbackend "github.com/errand-go/errand/backends/redis"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
)

const (
	outageTasks       = 200
	outageConcurrency = 10
	outageAfter       = 50                     // tasks run before the backend stops
	outageWork        = 100 * time.Millisecond // each task's run
)

// outageLength is how long the backend stays down: 10 s, or ERRAND_OUTAGE.
func outageLength(t *testing.T) time.Duration {
	if v := os.Getenv("ERRAND_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ERRAND_OUTAGE=%q: %v", v, err)
		}
		return d
	}
	return 10 * time.Second
}

// runBackendOutage runs the load on backend, stopping its server with
// stop (SIGKILL: a crash; what the server acknowledged must survive it) once outageAfter tasks have run and starting it again with start
// after outageLength.
func runBackendOutage(t *testing.T, backend errand.Backend, stop, start func(testing.TB)) {
	outage := outageLength(t)
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	var (
		runs      [outageTasks]atomic.Int32
		startsMu  sync.Mutex
		starts    [outageTasks][]time.Time // when each run of each task began
		ran       atomic.Int32
		reached   = make(chan struct{})
		reachOnce sync.Once
		reported  atomic.Int32
	)
	err = srv.Register("work", func(ctx context.Context, i int) (int, error) {
		runs[i].Add(1)
		startsMu.Lock()
		starts[i] = append(starts[i], time.Now())
		startsMu.Unlock()
		timer := time.NewTimer(outageWork)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if ran.Add(1) == outageAfter {
			reachOnce.Do(func() { close(reached) })
		}
		return i, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results := make([]*errand.AsyncResult, outageTasks)
	for i := range results {
		if results[i], err = srv.SendTask(ctx, errand.NewSignature("work", i)); err != nil {
			t.Fatalf("SendTask %d (backend up): %v", i, err)
		}
	}
	w := srv.NewWorker(errand.WorkerConfig{
		Concurrency:     outageConcurrency,
		ErrorBackoff:    200 * time.Millisecond,
		MaxErrorBackoff: time.Second,
		// 5s, not 2s: after its restart, a loaded machine's FerretDB took
		// more than 2s for writes that succeed, and a timed-out SUCCESS is
		// requeued, so a task begun after the outage ran twice.
		CallTimeout:  5 * time.Second,
		ErrorHandler: func(error) { reported.Add(1) },
	})
	w.Start()
	defer w.Shutdown(context.Background())

	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatalf("only %d of %d tasks ran before the outage was due", ran.Load(), outageTasks)
	}
	stoppedAt := ran.Load()
	stop(t)
	killed := time.Now()
	down := time.NewTimer(outage)
	<-down.C
	duringOutage := ran.Load() - stoppedAt
	restarting := time.Now()
	start(t)
	began := time.Now()

	var lost, twice, more []int
	for i, r := range results {
		st, err := r.Wait(ctx)
		switch {
		case err != nil || st.State != errand.StateSuccess:
			lost = append(lost, i)
			t.Errorf("task %d: state %v, error %v after the backend came back; want SUCCESS (at-least-once: no task is lost to a backend outage)", i, st, err)
		case runs[i].Load() == 0:
			lost = append(lost, i)
		case runs[i].Load() == 2:
			twice = append(twice, i)
		case runs[i].Load() > 2:
			more = append(more, i)
		}
	}
	t.Logf("%d tasks, %d slots, backend down %v after %d runs; %d runs finished while it was down; all %d done %v after it came back; lost %d, ran twice %d %v, more than twice %d; %d errors reported",
		outageTasks, outageConcurrency, outage, stoppedAt, duringOutage, outageTasks, time.Since(began).Round(100*time.Millisecond), len(lost), len(twice), twice, len(more), reported.Load())
	if reported.Load() == 0 {
		t.Errorf("no error was reported while the backend was down: the outage was not seen, so this run proves nothing")
	}
	if len(lost) > 0 {
		t.Errorf("%d tasks lost or never run: %v (at-least-once through a backend outage)", len(lost), lost)
	}
	if len(more) > 0 {
		t.Errorf("tasks %v ran more than twice: one outage may cost a task at most one extra run (documented window)", more)
	}
	// Running functions (Concurrency) plus deliveries settling beside the
	// slots (up to Concurrency more) may each have a SUCCESS to record when
	// the backend goes down.
	if len(twice) > 2*outageConcurrency {
		t.Errorf("%d tasks ran twice, more than twice the %d worker slots (running plus settling): only a task whose run ended while the backend was down may run again (documented window)", len(twice), outageConcurrency)
	}
	// A run's start is stamped in the handler, after the engine recorded
	// STARTED. A slot whose STARTED write landed just before the kill may
	// enter its handler just after it (the goroutine was not yet
	// scheduled), so "began before the kill" cannot be checked by clock
	// on a loaded machine. What can be checked: no run begins while the
	// backend is down except those already past STARTED when it went
	// down, at most one per slot; and a second run only once it is back.
	startsMu.Lock()
	defer startsMu.Unlock()
	var startedDown []int
	for i := range starts {
		for _, at := range starts[i] {
			if !at.Before(killed) && at.Before(restarting) {
				startedDown = append(startedDown, i)
			}
		}
	}
	if len(startedDown) > outageConcurrency {
		t.Errorf("%d runs began while the backend was down (tasks %v), more than the %d slots: a run may begin then only if its STARTED was recorded before the kill, at most one per slot", len(startedDown), startedDown, outageConcurrency)
	}
	for _, i := range twice {
		first, second := starts[i][0], starts[i][1]
		if !first.Before(restarting) || second.Before(restarting) {
			t.Errorf("task %d ran twice, first at %v and again at %v relative to the kill (server back at %v): only a task whose first run began before the backend went down may run again, once it is back (documented window)",
				i, first.Sub(killed), second.Sub(killed), restarting.Sub(killed))
		}
	}
}

// TestRedisBackendOutage kills a private redis-server (append-only file,
// fsync always, so what it acknowledged survives) under load.
func TestRedisBackendOutage(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		conformance.ServiceUnavailable(t, "redis-server not installed (scripts/services start installs it)")
	}
	addr, dir := conformance.FreeAddr(t), t.TempDir()
	host, port, _ := strings.Cut(addr, ":")
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "--port", port, "--bind", host, "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
	}, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	runBackendOutage(t, redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-outage"}), server.Kill, server.Start)
}

// TestMongoBackendOutage kills a private FerretDB (SQLite on disk) under
// load.
func TestMongoBackendOutage(t *testing.T) {
	t.Parallel()
	bin := ferretdb(t)
	addr, dir := conformance.FreeAddr(t), t.TempDir()
	c, err := gomongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Disconnect(context.Background()) })
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "--listen-addr="+addr, "--handler=sqlite", "--sqlite-url=file:"+dir+"/",
			"--state-dir="+dir, "--debug-addr=-", "--telemetry=disable", "--log-level=error")
	}, func(ctx context.Context) error { return c.Ping(ctx, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := mongobackend.New(ctx, c, &mongobackend.Options{Database: "errand_outage"})
	if err != nil {
		t.Fatal(err)
	}
	runBackendOutage(t, b, server.Kill, server.Start)
}

// ferretdb returns the FerretDB binary scripts/services builds and caches.
func ferretdb(t *testing.T) string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	bin := filepath.Join(cache, "errand", "ferretdb-v1.24.0", "ferretdb")
	if _, err := os.Stat(bin); err != nil {
		conformance.ServiceUnavailable(t, "FerretDB not built (scripts/services start builds it): "+err.Error())
	}
	return bin
}

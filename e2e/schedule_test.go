package e2e_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/schedule"
)

// schedulerEnv turns this test binary into one scheduler replica of
// TestScheduleThreeProcessesRedis; its value is the Redis key prefix.
const schedulerEnv = "ERRAND_E2E_SCHEDULER_PREFIX"

func scheduleServer(t *testing.T, rdb *goredis.Client, prefix string) *errand.Server {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{
		Broker:       redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix}),
		Backend:      redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix}),
		DefaultQueue: "tasks",
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	return srv
}

// The "done when": three scheduler processes run one "@every 1s"
// schedule on Redis for 60 s; a worker counts the runs of each tick: 60
// (±1 at the edges), none twice, none missing between the first and the
// last, none before its tick.
func TestScheduleThreeProcessesRedis(t *testing.T) {
	t.Parallel()
	rdb := otelRedisClient(t)
	if prefix := os.Getenv(schedulerEnv); prefix != "" {
		runSchedulerProcess(t, rdb, prefix)
		return
	}
	prefix := "e2e-schedule-" + rand.Text()[:8]
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), "*"+prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	// Three replicas: this test binary again, each running only this test.
	var outs [3]lockedOutput
	for i := range outs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestScheduleThreeProcessesRedis$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), schedulerEnv+"="+prefix)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		stdin, err := cmd.StdinPipe() // the replica runs until this closes
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start scheduler process %d: %v", i, err)
		}
		t.Cleanup(func() {
			stdin.Close()
			cmd.Wait()
		})
	}
	for i := range outs {
		for !strings.Contains(outs[i].String(), "scheduler replica running") {
			if ctx.Err() != nil {
				t.Fatalf("scheduler process %d did not start: %s", i, outs[i].String())
			}
			time.Sleep(20 * time.Millisecond) // polling the child's output
		}
	}

	// The worker: this process counts every run by tick.
	srv := scheduleServer(t, rdb, prefix)
	defer srv.Close()
	type run struct {
		uuid string
		at   time.Time
	}
	var mu sync.Mutex
	runs := map[string][]run{} // by tick
	srv.Register("beat", func(ctx context.Context) error {
		info, _ := errand.TaskInfoFrom(ctx)
		tick, _ := info.Headers[schedule.HeaderTick].(string)
		mu.Lock()
		runs[tick] = append(runs[tick], run{info.UUID, time.Now()})
		mu.Unlock()
		return nil
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 8})
	w.Start()
	defer w.Shutdown(context.Background())

	admin, err := schedule.New(srv, schedule.Config{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := admin.Set(ctx, schedule.Entry{ID: "beat", Spec: "@every 1s", Signature: errand.NewSignature("beat")}); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(time.Until(start.Add(60 * time.Second)))
	<-timer.C
	if err := admin.Remove(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	// The ticks up to the removal, all of them in (start, removed].
	var want []string
	for tk, _ := (schedule.Entry{Spec: "@every 1s"}).Next(start); !tk.After(removed); tk = tk.Add(time.Second) {
		want = append(want, tk.UTC().Format(time.RFC3339Nano))
	}
	// Wait for the last runs (a tick claimed just before the removal may
	// still be on its way), polling what the worker counted.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // and whether anything arrives twice after all
	mu.Lock()
	defer mu.Unlock()

	ticks := slices.Sorted(func(yield func(string) bool) {
		for tk := range runs {
			if !yield(tk) {
				return
			}
		}
	})
	var twice, early []string
	var late time.Duration
	for _, tk := range ticks {
		rs := runs[tk]
		if len(rs) > 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times", tk, len(rs)))
		}
		at, err := time.Parse(time.RFC3339Nano, tk)
		if err != nil {
			t.Fatalf("a run without a tick header (%q): %v", tk, err)
		}
		for _, r := range rs {
			if r.at.Before(at) {
				early = append(early, fmt.Sprintf("%s ran at %s", tk, r.at.Format(time.RFC3339Nano)))
			}
			if r.uuid != schedule.TickUUID("beat", at) {
				t.Errorf("tick %s ran as task %s; want TickUUID %s", tk, r.uuid, schedule.TickUUID("beat", at))
			}
			late = max(late, r.at.Sub(at))
		}
	}
	if len(twice) > 0 {
		t.Errorf("exactly-once promise broken: with three scheduler processes, %v", twice)
	}
	if len(early) > 0 {
		t.Errorf("never-early promise broken: %v", early)
	}
	var missing []string
	for _, tk := range want {
		if _, ok := runs[tk]; !ok {
			missing = append(missing, tk)
		}
	}
	if n := len(ticks); n < 59 || n > 61 || len(missing) > 1 {
		t.Errorf("@every 1s for %v with three scheduler processes ran %d ticks; want 60 (±1); ticks of that span never run: %v", removed.Sub(start).Round(time.Millisecond), n, missing)
	}
	for _, tk := range ticks {
		if !slices.Contains(want, tk) {
			t.Errorf("tick %s ran, outside the schedule's life (%s, %s]", tk, start.Format(time.RFC3339Nano), removed.Format(time.RFC3339Nano))
		}
	}
	t.Logf("three scheduler processes, @every 1s for %v: %d ticks ran, each once; latest run %v after its tick",
		removed.Sub(start).Round(time.Millisecond), len(ticks), late.Round(time.Millisecond))
	if t.Failed() {
		for i := range outs {
			t.Logf("scheduler process %d:\n%s", i, outs[i].String())
		}
	}
}

// runSchedulerProcess is one replica: it runs the scheduler until its
// stdin (a pipe from the test) closes.
func runSchedulerProcess(t *testing.T, rdb *goredis.Client, prefix string) {
	srv := scheduleServer(t, rdb, prefix)
	s, err := schedule.New(srv, schedule.Config{Reload: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	fmt.Fprintf(os.Stderr, "scheduler replica running, pid %d\n", os.Getpid())
	io.Copy(io.Discard, os.Stdin)
	cancel()
	<-done
}

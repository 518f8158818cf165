package redisbroker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// The "done when" for unique tasks and rate limits, on the real
// Redis (docs/flow-control.md).

// TestUniqueFiftyConcurrentSends: 50 concurrent sends of one unique key
// give 1 task and 49 errors satisfying errors.Is(err, errand.ErrDuplicate),
// each naming the one task's ID; on the single node and on the cluster.
func TestUniqueFiftyConcurrentSends(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: freshPrefix(t, rdb)})
			srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil)})
			if err != nil {
				t.Fatal(err)
			}
			const n = 50
			sigs := make([]*errand.Signature, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				sigs[i] = errand.NewSignature("report", 42)
				sigs[i].UniqueKey, sigs[i].UniqueFor = "report-42", time.Minute
				wg.Go(func() {
					<-start
					_, errs[i] = srv.SendTask(ctx, sigs[i])
				})
			}
			close(start)
			wg.Wait()
			var winners []string
			for i, err := range errs {
				if err == nil {
					winners = append(winners, sigs[i].UUID)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("%d concurrent sends of one unique key: %d were sent (%v), want exactly 1; errors: %v", n, len(winners), winners, errors.Join(errs...))
			}
			dups := 0
			for i, err := range errs {
				if err == nil {
					continue
				}
				var de *errand.DuplicateError
				if !errors.Is(err, errand.ErrDuplicate) || !errors.As(err, &de) || de.ID != winners[0] || !strings.Contains(err.Error(), winners[0]) {
					t.Errorf("send %d returned %v, want an errand.ErrDuplicate naming the task sent, %s", i, err, winners[0])
					continue
				}
				dups++
			}
			if dups != n-1 {
				t.Fatalf("%d sends: 1 task and %d ErrDuplicate, want %d", n, dups, n-1)
			}
			ins, err := b.List(ctx, errand.DefaultQueue, driver.ListPending, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(ins) != 1 || ins[0].ID != winners[0] {
				t.Errorf("the queue holds %d messages, want the one task %s", len(ins), winners[0])
			}
			t.Logf("%d concurrent sends: 1 task (%s), %d ErrDuplicate naming it", n, winners[0], dups)
		})
	}
}

// rateWorkerEnv marks this test binary re-run as a worker process of
// TestRateLimitTwoProcesses; its value is the JSON of a rateWorkerSpec.
const rateWorkerEnv = "ERRAND_TEST_RATE_WORKER"

type rateWorkerSpec struct {
	Prefix, Queue, List string
	Rate                float64
	Burst               int
}

const rateTask = "tick"

// TestRateLimitTwoProcesses: a limit of 100/s (burst 10) on one task name,
// with two worker processes on one Redis taking from a backlog of 1300
// tasks, holds within 10 % over 10 s.
//
// Each run appends "pid attempt start-µs" to a Redis list. The rate is
// measured over the 10 s from the first start: the starts in [t0, t0+10s]
// less the burst (the bucket starts full, so its 10 tokens go at once, at
// t0), divided by 10 s. The two processes share the one bucket on the
// server, so the rate is theirs together; each must have run a share.
func TestRateLimitTwoProcesses(t *testing.T) {
	if v := os.Getenv(rateWorkerEnv); v != "" {
		becomeRateWorker(t, v)
		return
	}
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL not set")
		return
	}
	rdb := redisClient(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	spec := rateWorkerSpec{Prefix: freshPrefix(t, rdb), Queue: "ticks", Rate: 100, Burst: 10}
	spec.List = "{" + spec.Prefix + "}:test-starts"
	const backlog, window = 1300, 10 * time.Second

	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: spec.Prefix})
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil), DefaultQueue: spec.Queue})
	if err != nil {
		t.Fatal(err)
	}
	for range backlog {
		if _, err := srv.SendTask(ctx, errand.NewSignature(rateTask)); err != nil {
			t.Fatal(err)
		}
	}

	env, _ := json.Marshal(spec)
	var outs []*lockedOut
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRateLimitTwoProcesses$", "-test.count=1", "-test.timeout=120s")
		cmd.Env = append(os.Environ(), rateWorkerEnv+"="+string(env))
		out := &lockedOut{}
		cmd.Stdout, cmd.Stderr = out, out
		stdin, err := cmd.StdinPipe() // closing it ends the worker
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a worker process: %v", err)
		}
		outs = append(outs, out)
		t.Cleanup(func() {
			stdin.Close()
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	output := func() string {
		var s []string
		for i, o := range outs {
			s = append(s, fmt.Sprintf("worker process %d:\n%s", i+1, o.String()))
		}
		return strings.Join(s, "\n")
	}

	// Wait for the first start, then for the window to pass.
	var t0 time.Time
	for t0.IsZero() {
		first, err := rdb.LIndex(ctx, spec.List, 0).Result()
		switch {
		case err == nil:
			t0 = parseStart(t, first).at
		case !errors.Is(err, goredis.Nil):
			t.Fatal(err)
		case ctx.Err() != nil:
			t.Fatalf("no task started: %v\n%s", ctx.Err(), output())
		default:
			time.Sleep(20 * time.Millisecond) // polling the list: the children are other processes
		}
	}
	time.Sleep(time.Until(t0.Add(window + 500*time.Millisecond)))
	raw, err := rdb.LRange(ctx, spec.List, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	byPID := map[int]int{}
	for _, r := range raw {
		s := parseStart(t, r)
		if s.attempt != 1 {
			t.Errorf("a task ran as attempt %d: a rate-limited task's attempt must not change", s.attempt)
		}
		byPID[s.pid]++
		starts = append(starts, s.at)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	t0 = starts[0]
	in := 0
	for _, s := range starts {
		if !s.After(t0.Add(window)) {
			in++
		}
	}
	rate := float64(in-spec.Burst) / window.Seconds()
	t.Logf("two worker processes, limit %v/s burst %d: %d starts in the %v from the first, %.1f/s beyond the burst",
		spec.Rate, spec.Burst, in, window, rate)
	t.Logf("starts by process: %v", byPID)
	if rate < spec.Rate*0.9 || rate > spec.Rate*1.1 {
		t.Errorf("rate limit promise broken: %.1f tasks a second beyond the burst over %v, want %v/s within 10 %%\n%s", rate, window, spec.Rate, output())
	}
	if len(byPID) != 2 {
		t.Errorf("tasks ran in %d processes (%v), want both worker processes\n%s", len(byPID), byPID, output())
	}
	for pid, n := range byPID {
		if n < in/10 {
			t.Errorf("process %d ran %d of %d tasks: both processes must take a share of the limit", pid, n, in)
		}
	}
}

type start struct {
	pid, attempt int
	at           time.Time
}

func parseStart(t *testing.T, s string) start {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 3 {
		t.Fatalf("bad start record %q", s)
	}
	pid, _ := strconv.Atoi(f[0])
	attempt, _ := strconv.Atoi(f[1])
	us, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		t.Fatalf("bad start record %q: %v", s, err)
	}
	return start{pid: pid, attempt: attempt, at: time.UnixMicro(us)}
}

// becomeRateWorker runs a worker of TestRateLimitTwoProcesses until its
// parent closes its stdin.
func becomeRateWorker(t *testing.T, env string) {
	var spec rateWorkerSpec
	if err := json.Unmarshal([]byte(env), &spec); err != nil {
		t.Fatal(err)
	}
	rdb := redisClient(t, os.Getenv("ERRAND_REDIS_URL"))
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: spec.Prefix})
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil), DefaultQueue: spec.Queue})
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	err = srv.Register(rateTask, func(ctx context.Context) error {
		info, _ := errand.TaskInfoFrom(ctx)
		return rdb.RPush(ctx, spec.List, fmt.Sprintf("%d %d %d", pid, info.Attempt, time.Now().UnixMicro())).Err()
	}, errand.WithRateLimit(spec.Rate, spec.Burst))
	if err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 8})
	w.Start()
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.Shutdown(ctx)
}

func redisClient(t *testing.T, u string) *goredis.Client {
	t.Helper()
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	rdb := goredis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(t, "Redis unreachable: "+err.Error())
	}
	return rdb
}

type lockedOut struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedOut) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedOut) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

package e2e_test

// BenchmarkHotPath measures errand's per-task path on the Redis broker and
// the Redis backend on one Redis, the numbers of docs/benchmarks.md's "Hot
// path" section: throughput, Go allocations, bytes and CPU µs (getrusage
// user+sys) per task (the whole process, producer and workers), and the Redis server's commands and CPU
// µs per task by command (INFO commandstats, reset before each phase: run
// it on a Redis of its own, ERRAND_HOTPATH_REDIS_URL, so that no other
// client's commands are counted). Each task is checked to run once.
//
//	ERRAND_HOTPATH_REDIS_URL=redis://127.0.0.1:16999/0 go test -run '^$' -bench HotPath -benchtime 1x .

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

func BenchmarkHotPath(b *testing.B) {
	u := os.Getenv("ERRAND_HOTPATH_REDIS_URL")
	if u == "" {
		b.Skip("ERRAND_HOTPATH_REDIS_URL not set (a Redis of the benchmark's own)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		b.Fatal(err)
	}
	o.PoolSize = 100
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	const n = 20000
	for _, workers := range []int{10, 50} {
		b.Run(fmt.Sprintf("drain/%d", workers), func(b *testing.B) {
			for range b.N {
				hotDrain(b, rdb, n, workers)
			}
		})
	}
	// The generic path: the backend on another database of the same
	// server, whose writes the broker cannot carry (a start and a state
	// write of their own, and an ack).
	o1 := *o
	o1.DB++
	rdb1 := goredis.NewClient(&o1)
	defer rdb1.Close()
	b.Run("drain-generic/10", func(b *testing.B) {
		for range b.N {
			hotDrainOn(b, rdb, rdb1, n, 10)
		}
	})
	b.Run("enqueue/1", func(b *testing.B) {
		for range b.N {
			hotEnqueue(b, rdb, n)
		}
	})
}

func hotServer(b *testing.B, rdb *goredis.Client) *errand.Server { return hotServerOn(b, rdb, rdb) }

// hotServerOn is hotServer with the backend on rdbBackend.
func hotServerOn(b *testing.B, rdb, rdbBackend *goredis.Client) *errand.Server {
	ctx := context.Background()
	for _, c := range []*goredis.Client{rdb, rdbBackend} {
		if err := c.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := errand.NewServer(errand.Config{
		Broker:  redisbroker.New(rdb, &redisbroker.Options{Prefix: "hot"}),
		Backend: redisbackend.New(rdbBackend, &redisbackend.Options{Prefix: "hot"}),
	})
	if err != nil {
		b.Fatal(err)
	}
	return srv
}

// phase measures f: wall time, allocations, and Redis commandstats.
type phase struct {
	d              time.Duration
	mallocs, bytes uint64
	cpu            time.Duration         // the process's user+sys CPU (getrusage)
	cmds           map[string][2]float64 // calls, usec
}

func measure(b *testing.B, rdb *goredis.Client, f func()) phase {
	ctx := context.Background()
	runtime.GC()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	// Every command into the slow log, to tell the scripts apart.
	rdb.ConfigSet(ctx, "slowlog-max-len", "1000000")
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	rdb.SlowLogReset(ctx)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := processCPU(b)
	t0 := time.Now()
	f()
	d := time.Since(t0)
	c1 := processCPU(b)
	runtime.ReadMemStats(&m1)
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	p := phase{d: d, mallocs: m1.Mallocs - m0.Mallocs, bytes: m1.TotalAlloc - m0.TotalAlloc, cpu: c1 - c0, cmds: map[string][2]float64{}}
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "-1")
	log, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range log {
		if len(e.Args) < 4 || !strings.HasPrefix(strings.ToLower(e.Args[0]), "eval") {
			continue
		}
		// A script by its first key's kind and its number of keys.
		first := e.Args[3]
		if i := strings.LastIndexAny(first, "}:"); i >= 0 {
			first = first[i+1:]
		}
		if len(first) > 12 {
			first = "<id>"
		}
		name := scriptName(first, e.Args[2])
		v := p.cmds[name]
		p.cmds[name] = [2]float64{v[0] + 1, v[1] + float64(e.Duration.Microseconds())}
	}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var calls, usec float64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseFloat(v, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		p.cmds[strings.TrimPrefix(name, "cmdstat_")] = [2]float64{calls, usec}
	}
	return p
}

// processCPU is the user plus system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scriptName names a script of the Redis broker or backend by the kind of
// its first key and its number of keys (before and after the hot-path
// redesign).
func scriptName(first, nkeys string) string {
	n, _ := strconv.Atoi(nkeys)
	switch {
	case first == "pending" && n >= 13:
		return "script(fetch)"
	case first == "pending" && (n == 9 || n == 10):
		return "script(publish)"
	case first == "inflight" && n == 8:
		return "script(ack)"
	case first == "inflight" && n > 8:
		return "script(ackStates)"
	case first == "<id>" && n == 1:
		return "script(start)"
	case first == "inflight" && n == 2:
		return "script(extend)"
	}
	return "script(" + first + "," + nkeys + " keys)"
}

func (p phase) report(b *testing.B, n int) {
	b.ReportMetric(float64(n)/p.d.Seconds(), "tasks/s")
	b.ReportMetric(float64(p.mallocs)/float64(n), "allocs/task")
	b.ReportMetric(float64(p.bytes)/float64(n), "B/task")
	b.ReportMetric(float64(p.cpu.Microseconds())/float64(n), "go-cpu-µs/task")
	var names []string
	var usec, calls float64
	for c, v := range p.cmds {
		if strings.HasPrefix(c, "config") || strings.HasPrefix(c, "info") || strings.HasPrefix(c, "slowlog") || strings.HasPrefix(c, "script(") {
			continue
		}
		names = append(names, c)
		calls += v[0]
		usec += v[1]
	}
	sort.Slice(names, func(i, j int) bool { return p.cmds[names[i]][1] > p.cmds[names[j]][1] })
	b.ReportMetric(usec/float64(n), "redis-µs/task")
	b.ReportMetric(calls/float64(n), "redis-cmds/task")
	var sb strings.Builder
	for c := range p.cmds {
		if strings.HasPrefix(c, "script(") {
			names = append(names, c)
		}
	}
	sort.Slice(names, func(i, j int) bool { return p.cmds[names[i]][1] > p.cmds[names[j]][1] })
	for _, c := range names {
		v := p.cmds[c]
		fmt.Fprintf(&sb, " %s %.2f calls %.1f µs;", c, v[0]/float64(n), v[1]/float64(n))
	}
	b.Logf("per task:%s", sb.String())
}

func hotDrain(b *testing.B, rdb *goredis.Client, n, workers int) { hotDrainOn(b, rdb, rdb, n, workers) }

// hotDrainOn is hotDrain with the backend on rdbBackend.
func hotDrainOn(b *testing.B, rdb, rdbBackend *goredis.Client, n, workers int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := hotServerOn(b, rdb, rdbBackend)
	defer srv.Close()
	var mu sync.Mutex
	runs := make(map[int]int, n)
	all := make(chan struct{})
	srv.Register("noop", func(i, a, c, d, e int64) error {
		mu.Lock()
		runs[int(i)]++
		if len(runs) == n && runs[int(i)] == 1 {
			close(all)
		}
		mu.Unlock()
		return nil
	})
	sigs := make([]*errand.Signature, n)
	for i := range sigs {
		sigs[i] = errand.NewSignature("noop", int64(i), int64(1), int64(2), int64(3), int64(4))
	}
	g, _ := errand.NewGroup(sigs...)
	if _, err := srv.SendGroup(ctx, g, errand.SendConcurrency(4)); err != nil {
		b.Fatal(err)
	}
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: workers})
	p := measure(b, rdb, func() {
		wk.Start()
		select {
		case <-all:
		case <-ctx.Done():
			b.Fatal("drain timed out")
		}
	})
	if err := wk.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if runs[i] != 1 {
			b.Fatalf("task %d ran %d times; want once", i, runs[i])
		}
	}
	p.report(b, n)
}

func hotEnqueue(b *testing.B, rdb *goredis.Client, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := hotServer(b, rdb)
	defer srv.Close()
	p := measure(b, rdb, func() {
		for i := range n {
			if _, err := srv.SendTask(ctx, errand.NewSignature("noop", int64(i), int64(1), int64(2), int64(3), int64(4))); err != nil {
				b.Fatal(err)
			}
		}
	})
	p.report(b, n)
}

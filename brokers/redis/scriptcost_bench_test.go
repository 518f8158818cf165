package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// BenchmarkScriptCost measures the Redis server's work per task in the
// carried hot path's scripts, on a Redis of the benchmark's own
// (ERRAND_HOTPATH_REDIS_URL: INFO commandstats counts every client's
// commands). It publishes ERRAND_COST_TASKS tasks (default 10 000) with
// their PENDING states (CarryPending), then drains them as a worker of
// ten slots does in BenchmarkHotPath, from one client: fetch and start
// five (CarryStart), settle one or two with SUCCESS (CarrySettle) until
// five are left in flight, again. It reports, per task, the scripts'
// µs (commandstats, their commands included), the server's CPU µs (INFO
// cpu) and each command's calls and µs.
//
// On a busy machine the clocks move by a third between runs; instructions
// do not. ERRAND_COST_HOOK, a shell command run with "start drain" and
// "end drain" around the drain, can count them with the server under
// callgrind (valgrind --tool=callgrind --instr-atstart=no redis-server
// ...; the hook runs callgrind_control -z and -i on, then -i off and -d,
// and reads the dump's totals): the same code gives the same count within
// 1%.
//
//	ERRAND_HOTPATH_REDIS_URL=redis://127.0.0.1:16999/0 go test -run '^$' -bench ScriptCost -benchtime 1x .
func BenchmarkScriptCost(b *testing.B) {
	u := os.Getenv("ERRAND_HOTPATH_REDIS_URL")
	if u == "" {
		b.Skip("ERRAND_HOTPATH_REDIS_URL not set (a Redis of the benchmark's own)")
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		b.Fatal(err)
	}
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	ctx := context.Background()
	n := 10000
	if s := os.Getenv("ERRAND_COST_TASKS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const fetchBatch, settleBatch = 5, 2
	for range b.N {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		br := redisbroker.New(rdb, &redisbroker.Options{Prefix: "cost"})
		be := newSameServerBackend(b, rdb, "cost")
		pub, start, settle := carryPending(br, be), carryStart(br, be), carrySettle(br, be)
		if pub == nil || start == nil || settle == nil {
			b.Fatal("no carrier")
		}
		spec := []string{"noop"}
		created := time.Now().UTC()
		for i := 0; i < n; i += 100 {
			var sts []*driver.TaskState
			var msgs []driver.Message
			for j := i; j < i+100; j++ {
				id := fmt.Sprintf("%08d-aaaa-bbbb-cccc-dddddddddddd", j)
				sts = append(sts, &driver.TaskState{TaskUUID: id, TaskName: "noop", State: driver.StatePending, Attempt: 1, CreatedAt: created})
				msgs = append(msgs, driver.Message{ID: id, Queue: "q", Task: "noop", TaskAttempt: 1,
					Body: []byte(`{"task":"noop","args":[` + strconv.Itoa(j) + `,1,2,3,4],"id":"` + id + `"}`)})
			}
			if ok, err := pub(ctx, sts, msgs); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
		// Warm the scripts.
		ds, _, _, err := start(ctx, "q", 1, time.Minute, spec)
		if err != nil || len(ds) != 1 {
			b.Fatal(ds, err)
		}
		done := func(ds []*driver.Delivery) []*driver.TaskState {
			out := make([]*driver.TaskState, len(ds))
			for i, d := range ds {
				out[i] = &driver.TaskState{TaskUUID: d.ID, TaskName: "noop", State: driver.StateSuccess, Attempt: 1, CreatedAt: created,
					StartedAt: created, FinishedAt: time.Now().UTC(), Results: []driver.Result{{Type: "int64", Value: []byte("1")}}}
			}
			return out
		}
		if errs := settle(ctx, ds, done(ds)); errors.Join(errs...) != nil {
			b.Fatal(errs)
		}
		// As a worker of ten slots: fetch five, settle one or two at a
		// time until five are left in flight, again.
		fetched := 1
		drained := costPhase(b, rdb, "drain", func() {
			var window []*driver.Delivery
			for k := 0; fetched < n || len(window) > 0; k++ {
				if fetched < n && len(window) <= fetchBatch {
					ds, starts, _, err := start(ctx, "q", fetchBatch, time.Minute, spec)
					if err != nil || len(ds) == 0 {
						b.Fatal(len(ds), err)
					}
					for _, s := range starts {
						if s == nil || !s.Written {
							b.Fatalf("start %+v; want written", s)
						}
					}
					fetched += len(ds)
					window = append(window, ds...)
				}
				m := min(1+k%settleBatch, len(window))
				if errs := settle(ctx, window[:m], done(window[:m])); errors.Join(errs...) != nil {
					b.Fatal(errs)
				}
				window = window[m:]
			}
		})
		b.Logf("fetch %d a call, settle 1 or 2:%s", fetchBatch, drained.per(n-1))
		b.ReportMetric(drained.total()/float64(n-1), "scripts-µs/task")
		b.ReportMetric(drained["cpu"][1]/float64(n-1), "cpu-µs/task")
		st, err := br.Stats(ctx, "q")
		if err != nil || st.Pending != 0 || st.InFlight != 0 {
			b.Fatalf("queue after: %+v, %v", st, err)
		}
	}
}

type costStats map[string][2]float64 // command -> calls, µs

// serverCPU is the Redis server's user and system CPU time so far (µs):
// unlike commandstats' wall times, not inflated by other processes on a
// busy machine.
func serverCPU(b *testing.B, rdb *goredis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var t float64
	for _, l := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			t += f * 1e6
		}
	}
	return t
}

func (c costStats) total() float64 {
	var t float64
	for name, v := range c {
		if name == "evalsha" || name == "eval" || name == "fcall" || name == "fcall_ro" {
			t += v[1]
		}
	}
	return t
}

func (c costStats) per(n int) string {
	names := make([]string, 0, len(c))
	for name := range c {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return c[names[i]][1] > c[names[j]][1] })
	var sb strings.Builder
	for _, name := range names {
		v := c[name]
		fmt.Fprintf(&sb, " %s %.2f×/%.2fµs;", name, v[0]/float64(n), v[1]/float64(n))
	}
	return sb.String()
}

// costPhase runs f and returns the server's commandstats and CPU over it.
// ERRAND_COST_HOOK, when set, is a shell command run with "start PHASE"
// before f and "end PHASE" after it (to count instructions under
// callgrind: no clock on a busy machine is as steady).
func costPhase(b *testing.B, rdb *goredis.Client, phase string, f func()) costStats {
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	hook := func(what string) {
		if h := os.Getenv("ERRAND_COST_HOOK"); h != "" {
			if out, err := exec.Command("sh", "-c", h+" "+what+" "+phase).CombinedOutput(); err != nil {
				b.Fatalf("ERRAND_COST_HOOK %s: %v %s", what, err, out)
			}
		}
	}
	hook("start")
	cpu0 := serverCPU(b, rdb)
	f()
	cpu1 := serverCPU(b, rdb)
	hook("end")
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := costStats{"cpu": {1, cpu1 - cpu0}}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if strings.HasPrefix(name, "config") || strings.HasPrefix(name, "info") {
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
		out[name] = [2]float64{calls, usec}
	}
	return out
}

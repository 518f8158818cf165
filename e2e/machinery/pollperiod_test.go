package machinerye2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	machinery "github.com/RichardKnop/machinery/v2"
	mbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	"github.com/RichardKnop/machinery/v2/backends/result"
	mbroker "github.com/RichardKnop/machinery/v2/brokers/redis"
	mconfig "github.com/RichardKnop/machinery/v2/config"
	"github.com/RichardKnop/machinery/v2/locks/eager"
	"github.com/RichardKnop/machinery/v2/tasks"

	"github.com/errand-go/errand"
	errandconfig "github.com/errand-go/errand/config"
)

// exampleConfig is machinery's own example config file (testconfig.yml),
// unchanged, on a queue and delayed set of the test's own, with what a
// deployment sets in the environment over it: BROKER and RESULT_BACKEND
// naming the test's Redis, REDIS_MASTER_NAME emptied (the file names a
// Sentinel master this Redis does not have), and extra.
type exampleConfig struct {
	rs             *redisServer
	path           string
	queue, delayed string
	env            map[string]string
	mcnf           mconfig.Config // as machinery's own loader read the file, with the overrides
}

func newExampleConfig(t *testing.T, rs *redisServer, name string, extra map[string]string) *exampleConfig {
	t.Helper()
	c := &exampleConfig{rs: rs, path: machineryTestConfig(t), queue: unique(name + "-q"), delayed: unique(name + "-delayed")}
	redisURL := "redis://" + rs.addr + "/" + strconv.Itoa(testDB)
	c.env = map[string]string{"BROKER": redisURL, "RESULT_BACKEND": redisURL, "REDIS_MASTER_NAME": "",
		"DEFAULT_QUEUE": c.queue, "REDIS_DELAYED_TASKS_KEY": c.delayed}
	for k, v := range extra {
		c.env[k] = v
	}
	// machinery's loader decodes into its package's default Redis config
	// (a shared pointer): read the file once, before any machinery worker
	// runs, and give each server a copy.
	cnf, err := mconfig.NewFromYaml(c.path, false)
	if err != nil {
		t.Fatal(err)
	}
	c.mcnf = *cnf
	r := *cnf.Redis
	r.MasterName = ""
	for k, p := range map[string]*int{"REDIS_NORMAL_TASKS_POLL_PERIOD": &r.NormalTasksPollPeriod, "REDIS_DELAYED_TASKS_POLL_PERIOD": &r.DelayedTasksPollPeriod} {
		if v, ok := c.env[k]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			*p = n
		}
	}
	r.DelayedTasksKey = c.delayed
	c.mcnf.Redis, c.mcnf.DefaultQueue = &r, c.queue
	return c
}

// errandWorker starts an errand worker configured through errandconfig
// from the file and the environment, with concurrency slots (0: the
// configuration's), running tasks.
func (c *exampleConfig) errandWorker(t *testing.T, concurrency int, tasks map[string]any) errandconfig.Settings {
	t.Helper()
	mc, err := errandconfig.LoadMachinery(c.path, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	settings, err := errandconfig.FromMachinery(mc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := settings.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.RegisterTasks(tasks); err != nil {
		t.Fatal(err)
	}
	wc := settings.WorkerConfig()
	if concurrency > 0 {
		wc.Concurrency = concurrency
	}
	w := srv.NewWorker(wc)
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("errand worker shutdown: %v", err)
		}
		srv.Close()
	})
	return *settings
}

// machinery returns a machinery server configured by machinery's own
// loader from the same file, with the same overrides.
func (c *exampleConfig) machinery() *machinery.Server {
	cnf := c.mcnf
	r := *cnf.Redis
	cnf.Redis = &r
	return machinery.NewServer(&cnf, mbroker.NewGR(&cnf, []string{c.rs.addr}, testDB), mbackend.NewGR(&cnf, []string{c.rs.addr}, testDB), eager.New())
}

// TestMachineryYAMLWorkerTakesTaskAtOnce: machinery's
// normal_tasks_poll_period is the timeout of its workers' BLPOP, which
// takes a new task the moment it is pushed. An errand worker configured
// from machinery's example file takes a task a machinery producer sends
// to it while it is idle at once too, not when a poll period ends: with
// both poll periods set to 6s in the environment, the task sent right
// after the first one finished (the worker has just found the queue empty)
// must complete well within them. The 3s bound is only against waiting
// for the period: an idle fetch that sleeps between looks (the old
// mapping onto poll_interval) sits out the full 6s. Latency figures live
// in the bench (the machinery queue scenario), not here.
func TestMachineryYAMLWorkerTakesTaskAtOnce(t *testing.T) {
	rs := newRedis(t)
	const period = 6 * time.Second
	ms := strconv.Itoa(int(period.Milliseconds()))
	c := newExampleConfig(t, rs, "yaml-wake", map[string]string{"REDIS_NORMAL_TASKS_POLL_PERIOD": ms, "REDIS_DELAYED_TASKS_POLL_PERIOD": ms})
	r := newRuns()
	settings := c.errandWorker(t, 0, taskFuncs(r, "errand"))
	if !strings.Contains(settings.Broker, "max_block="+ms+"ms") {
		t.Errorf("broker URL %s: want max_block=%sms, machinery's poll periods as the bound of one wait", settings.Broker, ms)
	}
	prod := c.machinery()
	first := unique("first")
	ar, err := prod.SendTask(sig("add", first, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ar.GetWithTimeout(getTimeout, getSleep); err != nil || len(got) != 1 || got[0].Interface() != int64(3) {
		t.Fatalf("first task: %v, %v; want 3", values(got), err)
	}
	// The worker ran the first task and found the queue empty: it is idle.
	second := unique("second")
	sent := time.Now()
	ar, err = prod.SendTask(sig("add", second, 20, 22))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ar.GetWithTimeout(period/2, getSleep)
	if err != nil || len(got) != 1 || got[0].Interface() != int64(42) {
		t.Fatalf("a task sent to an idle errand worker configured from machinery's example file (poll periods %v) did not complete within %v: %v, %v; an idle worker must take a new task at once, as machinery's BLPOP does",
			period, period/2, values(got), err)
	}
	at, who := r.firstRun(second)
	t.Logf("sent → run on the %s worker: %v", who, at.Sub(sent))
	r.exactlyOnce(t, map[string]int{first: 1, second: 1})
}

// TestMachineryYAMLFairShare: a machinery worker and an errand worker,
// both configured from machinery's example file as it is (its
// normal_tasks_poll_period of 1001 ms among them) and with 4 slots each,
// on one queue, as in a rolling migration: of the tasks a machinery
// producer sends, each runs a fair share (at least 30%), and every task
// runs once. An errand worker that sleeps between looks at an idle queue
// runs few or none: machinery's BLPOP takes each task the moment it
// arrives. The count is of tasks, not of time: both workers are first seen
// to run a task, then 200 tasks of 10 ms each keep both busy.
func TestMachineryYAMLFairShare(t *testing.T) {
	rs := newRedis(t)
	c := newExampleConfig(t, rs, "yaml-fair", nil)
	r := newRuns()
	withNap := func(who string) map[string]any {
		fs := taskFuncs(r, who)
		fs["nap"] = func(tag string, ms int64) (int64, error) {
			r.add(tag, who)
			time.Sleep(time.Duration(ms) * time.Millisecond) // the task's work
			return ms, nil
		}
		return fs
	}
	const slots = 4
	c.errandWorker(t, slots, withNap("errand"))
	msrv := c.machinery()
	if err := msrv.RegisterTasks(withNap("machinery")); err != nil {
		t.Fatal(err)
	}
	mw := msrv.NewWorker("machinery-fair", slots)
	errc := make(chan error, 1)
	mw.LaunchAsync(errc)
	t.Cleanup(func() {
		mw.Quit()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("machinery worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("machinery worker did not stop within 30s of Quit")
		}
	})
	prod := c.machinery()
	want := map[string]int{}
	send := func(tags []string, s func(tag string) *tasks.Signature) {
		t.Helper()
		ars := make([]*result.AsyncResult, len(tags))
		for i, tag := range tags {
			want[tag] = 1
			ar, err := prod.SendTask(s(tag))
			if err != nil {
				t.Fatal(err)
			}
			ars[i] = ar
		}
		for i, ar := range ars {
			if _, err := ar.GetWithTimeout(getTimeout, getSleep); err != nil {
				t.Fatalf("task %s: %v", tags[i], err)
			}
		}
	}
	// Warm-up: until each worker has run a task (both are consuming).
	id := unique("fair")
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		tags := make([]string, slots)
		for i := range tags {
			tags[i] = fmt.Sprintf("%s-warm-%d-%d", id, round, i)
		}
		send(tags, func(tag string) *tasks.Signature { return sig("add", tag, 1, 1) })
		k := r.kindsOf(id + "-warm-")
		if k["errand"] > 0 && k["machinery"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d warm-up rounds in 60s, runs by worker kind %v: both workers must take tasks from the queue they share", round+1, k)
		}
	}
	const n = 200
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("%s-task-%d", id, i)
	}
	send(tags, func(tag string) *tasks.Signature { return sig("nap", tag, 10) })
	k := r.kindsOf(id + "-task-")
	t.Logf("of %d tasks: %v", n, k)
	for _, who := range []string{"errand", "machinery"} {
		if k[who]*100 < 30*n {
			t.Errorf("the %s worker ran %d of %d tasks (%v), want at least 30%%: with equal slots on one queue, each worker takes a fair share", who, k[who], n, k)
		}
	}
	r.exactlyOnce(t, want)
}

// kindsOf counts the runs of the tasks whose tags start with prefix, by
// worker kind.
func (r *runs) kindsOf(prefix string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for tag, by := range r.by {
		if strings.HasPrefix(tag, prefix) {
			for k, n := range by {
				out[k] += n
			}
		}
	}
	return out
}

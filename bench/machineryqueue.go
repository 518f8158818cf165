package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RichardKnop/machinery/v2"
	mredisbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	mredisbroker "github.com/RichardKnop/machinery/v2/brokers/redis"
	mconfig "github.com/RichardKnop/machinery/v2/config"
	eagerlock "github.com/RichardKnop/machinery/v2/locks/eager"
	mtasks "github.com/RichardKnop/machinery/v2/tasks"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/redis" // redis:// backends, format=machinery among them
	_ "github.com/errand-go/errand/brokers/redis"  // redis:// brokers, format=machinery among them
	errandconfig "github.com/errand-go/errand/config"
)

// The machinery queue scenarios (issue 31): a machinery v2.0.16 producer
// sends to machinery's own Redis queue, and either an errand worker in
// machinery's format or a machinery worker runs the tasks, both configured
// from machinery's own example file (config/testconfig.yml in machinery's
// module: normal_tasks_poll_period 1001 ms, delayed_tasks_poll_period
// 23 ms, ...), the errand one through errandconfig, the machinery one
// through machinery's loader. Only the servers (BROKER, RESULT_BACKEND:
// the bench's Redis), the Sentinel master (emptied), the queue and the
// delayed set (fresh per run) and, for errand, the key prefix (so the
// bench's cleanup finds its keys) differ from the file.
//
//   - latency: mqLatN tasks of 100 ms each (the issue's), sent one at a
//     time to a worker of 10 slots, each when the one before has
//     completed (the worker is idle: it has just found the queue empty):
//     send → SUCCESS read by machinery's AsyncResult (polling every 1 ms),
//     the end-to-end latency; and send → handler start from the same
//     tasks, the pickup alone.
//   - fair share: a machinery worker and an errand worker of 10 slots each
//     on one queue; mqShareN tasks of 2 ms each sent by 10 producers; the
//     share of the tasks each ran.

// mqRuns holds every round's values by metric and subject.
type mqRuns map[string]map[string][]float64

func (m mqRuns) add(metric, subject string, v float64) {
	if m[metric] == nil {
		m[metric] = map[string][]float64{}
	}
	m[metric][subject] = append(m[metric][subject], v)
}

func mqLatN() int {
	if *quick {
		return 10
	}
	return 30
}

// mqWork is how long each task of the latency scenario works.
const mqWork = 100 * time.Millisecond

func mqShareN() int {
	if *quick {
		return 400
	}
	return 2000
}

// mqSetup is machinery's example file, read once by machinery's loader.
var mqSetup struct {
	once sync.Once
	path string
	cnf  mconfig.Config
	err  error
}

// machineryExample locates machinery's example config in its module
// (go list) and reads it with machinery's loader.
func machineryExample() (string, mconfig.Config, error) {
	mqSetup.once.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/RichardKnop/machinery/v2").Output()
		if err != nil {
			mqSetup.err = fmt.Errorf("locating machinery's module (go list -m): %w", err)
			return
		}
		mqSetup.path = filepath.Join(strings.TrimSpace(string(out)), "config", "testconfig.yml")
		cnf, err := mconfig.NewFromYaml(mqSetup.path, false)
		if err != nil {
			mqSetup.err = err
			return
		}
		mqSetup.cnf = *cnf
		r := *cnf.Redis // machinery's loader decodes into a shared default: keep a copy
		mqSetup.cnf.Redis = &r
	})
	return mqSetup.path, mqSetup.cnf, mqSetup.err
}

// mqQueue is one fresh machinery queue configured from the example file.
type mqQueue struct {
	q    string
	path string
	cnf  mconfig.Config
}

func newMQQueue(r *report) (*mqQueue, error) {
	machineryInit(r)
	path, cnf, err := machineryExample()
	if err != nil {
		return nil, err
	}
	q := token("mq")
	redis := *cnf.Redis
	redis.MasterName, redis.DelayedTasksKey = "", q+":delayed"
	cnf.Redis, cnf.DefaultQueue = &redis, q
	return &mqQueue{q: q, path: path, cnf: cnf}, nil
}

// machinery returns a machinery server on the queue, as machinery's loader
// configured it.
func (m *mqQueue) machinery() *machinery.Server {
	cnf := m.cnf
	redis := *cnf.Redis
	cnf.Redis = &redis
	a, db := machineryShared.addr, machineryShared.db
	return machinery.NewServer(&cnf, mredisbroker.NewGR(&cnf, []string{a}, db), mredisbackend.NewGR(&cnf, []string{a}, db), eagerlock.New())
}

// machineryWorker starts a machinery worker of w slots running noop5 as
// run; stop stops it.
func (m *mqQueue) machineryWorker(w int, run func(id, sent int64)) (stop func(), err error) {
	srv := m.machinery()
	if err := srv.RegisterTasks(map[string]any{"noop5": func(id, sent, _, _, _ int64) (int64, error) { run(id, sent); return id, nil }}); err != nil {
		return nil, err
	}
	wk := srv.NewWorker("bench-mq", w)
	errs := make(chan error, 4)
	wk.LaunchAsync(errs)
	return func() {
		wk.Quit()
		select {
		case <-errs:
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "bench: machinery worker did not stop within 30 s")
		}
	}, nil
}

// errandWorker starts an errand worker of w slots configured through
// errandconfig from the example file, running noop5 as run.
func (m *mqQueue) errandWorker(ctx context.Context, w int, run func(id, sent int64)) (stop func(), err error) {
	redisURL := "redis://" + machineryShared.addr + "/" + strconv.Itoa(machineryShared.db)
	env := map[string]string{"BROKER": redisURL, "RESULT_BACKEND": redisURL, "REDIS_MASTER_NAME": "",
		"DEFAULT_QUEUE": m.q, "REDIS_DELAYED_TASKS_KEY": m.cnf.Redis.DelayedTasksKey}
	mc, err := errandconfig.LoadMachinery(m.path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		return nil, err
	}
	settings, err := errandconfig.FromMachinery(mc)
	if err != nil {
		return nil, err
	}
	settings.Broker += "&prefix=" + m.q // errand's keys beside machinery's, under the bench's cleanup
	cfg, err := settings.Open(ctx)
	if err != nil {
		return nil, err
	}
	srv, err := errand.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	srv.Register("noop5", func(id, sent, _, _, _ int64) (int64, error) { run(id, sent); return id, nil })
	wc := settings.WorkerConfig()
	wc.Concurrency = w
	wk := srv.NewWorker(wc)
	wk.Start()
	return func() {
		wk.Shutdown(context.Background())
		srv.Close()
	}, nil
}

func (m *mqQueue) sig(id, sent int64) *mtasks.Signature {
	args := make([]mtasks.Arg, 5)
	for i, v := range five(id, sent) {
		args[i] = mtasks.Arg{Type: "int64", Value: v}
	}
	return &mtasks.Signature{UUID: m.q + ":" + strconv.FormatInt(id, 10), Name: "noop5", RoutingKey: m.q, Args: args}
}

// machineryQueue runs the latency scenario on both workers and the fair
// share scenario, *rounds times, the workers' order reversed every other
// round.
func machineryQueue(r *report) error {
	if r.mq == nil {
		r.mq = mqRuns{}
	}
	for round := range *rounds {
		order := []string{"errand", "machinery"}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, who := range order {
			fmt.Fprintf(os.Stderr, "bench: machinery queue round %d: latency: %s\n", round+1, who)
			ctx, cancel := ctxTimeout()
			err := mqLatency(ctx, r, who)
			cancel()
			if err != nil {
				return fmt.Errorf("round %d, latency, %s: %w", round+1, who, err)
			}
			if err := r.clean(); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "bench: machinery queue round %d: fair share\n", round+1)
		ctx, cancel := ctxTimeout()
		err := mqShare(ctx, r)
		cancel()
		if err != nil {
			return fmt.Errorf("round %d, fair share: %w", round+1, err)
		}
		if err := r.clean(); err != nil {
			return err
		}
	}
	fmt.Fprint(os.Stderr, r.mqMarkdown())
	return nil
}

// mqLatency sends mqLatN tasks of mqWork each from a machinery producer
// to a worker of who's kind (10 slots), one at a time, each when the one
// before has completed, and records send → SUCCESS (read by machinery's
// AsyncResult) and send → handler start.
func mqLatency(ctx context.Context, r *report, who string) error {
	m, err := newMQQueue(r)
	if err != nil {
		return err
	}
	total := mqLatN()
	var mu sync.Mutex
	pickup := make([]time.Duration, 0, total)
	o := newOnce(total)
	run := func(id, sent int64) {
		d := time.Since(time.Unix(0, sent))
		mu.Lock()
		pickup = append(pickup, d)
		mu.Unlock()
		o.mark(id)
		time.Sleep(mqWork) // the task's work
	}
	var stop func()
	if who == "errand" {
		stop, err = m.errandWorker(ctx, 10, run)
	} else {
		stop, err = m.machineryWorker(10, run)
	}
	if err != nil {
		return err
	}
	defer stop()
	prod := m.machinery()
	e2e := make([]time.Duration, 0, total)
	for i := range total {
		sent := time.Now()
		ar, err := prod.SendTaskWithContext(ctx, m.sig(int64(i), sent.UnixNano()))
		if err != nil {
			return err
		}
		res, err := ar.GetWithTimeout(time.Minute, time.Millisecond)
		if err != nil {
			return fmt.Errorf("task %d: %w", i, err)
		}
		if len(res) != 1 || res[0].Int() != int64(i) {
			return fmt.Errorf("task %d: result %v, want %d", i, res, i)
		}
		e2e = append(e2e, time.Since(sent))
	}
	if err := o.wait(ctx); err != nil {
		return err
	}
	p50, _, _ := percentiles(e2e)
	r.mq.add("e2e50", who, ms(p50))
	mu.Lock()
	p50, p99, _ := percentiles(pickup)
	mu.Unlock()
	r.mq.add("pick50", who, ms(p50))
	r.mq.add("pick99", who, ms(p99))
	return nil
}

// mqShare starts a machinery worker and an errand worker of 10 slots each
// on one queue, sends mqShareN tasks of 2 ms each from 10 machinery
// producer goroutines, and records the share of the tasks each ran.
func mqShare(ctx context.Context, r *report) error {
	m, err := newMQQueue(r)
	if err != nil {
		return err
	}
	total := mqShareN()
	o := newOnce(total)
	var byErrand, byMachinery atomic.Int64
	work := func(n *atomic.Int64) func(id, sent int64) {
		return func(id, _ int64) {
			time.Sleep(2 * time.Millisecond) // the task's work
			n.Add(1)
			o.mark(id)
		}
	}
	stopM, err := m.machineryWorker(10, work(&byMachinery))
	if err != nil {
		return err
	}
	defer stopM()
	stopE, err := m.errandWorker(ctx, 10, work(&byErrand))
	if err != nil {
		return err
	}
	defer stopE()
	prod := m.machinery()
	if err := concurrentlyN(total, producers, func(i int) error {
		_, err := prod.SendTaskWithContext(ctx, m.sig(int64(i), 0))
		return err
	}); err != nil {
		return err
	}
	if err := o.wait(ctx); err != nil {
		return err
	}
	r.mq.add("share", "errand", 100*float64(byErrand.Load())/float64(total))
	r.mq.add("share", "machinery", 100*float64(byMachinery.Load())/float64(total))
	return nil
}

// mqMarkdown prints the machinery queue rows: medians over the rounds,
// with their ranges, and the targets.
func (r *report) mqMarkdown() string {
	if len(r.mq) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## A machinery producer's tasks: errand worker vs machinery worker (issue 31)\n\n")
	fmt.Fprintf(&b, "machinery v2.0.16's producer sends to its own Redis queue; an errand worker in machinery's format (errandconfig) or a machinery worker (machinery's loader), both configured from machinery's own example file (config/testconfig.yml: normal_tasks_poll_period 1001 ms, delayed_tasks_poll_period 23 ms), takes the tasks. %d rounds, the workers' order reversed every other round; each cell is the median, with the range over the rounds.\n\n", *rounds)
	b.WriteString("| scenario | machinery worker | errand worker | errand ÷ machinery | target | met |\n|---|---|---|---|---|---|\n")
	if e := r.mq["e2e50"]; e != nil {
		ratio := 0.0
		if m := median(e["machinery"]); m > 0 {
			ratio = median(e["errand"]) / m
		}
		met := "not met"
		if ratio > 0 && ratio <= 1.1 {
			met = "met"
		}
		fmt.Fprintf(&b, "| end-to-end latency p50: %d tasks of %v, each sent to an idle worker of 10 slots when the one before completed (send → SUCCESS read by machinery's AsyncResult) | %s | %s | %s | errand ≤ 1.1× machinery | %s |\n",
			mqLatN(), mqWork, cell(e["machinery"], "ms"), cell(e["errand"], "ms"), ratioCell(e["errand"], e["machinery"]), met)
		p50, p99 := r.mq["pick50"], r.mq["pick99"]
		fmt.Fprintf(&b, "| pickup p50, the same tasks (send → handler start) | %s | %s | %s | | |\n",
			cell(p50["machinery"], "ms"), cell(p50["errand"], "ms"), ratioCell(p50["errand"], p50["machinery"]))
		fmt.Fprintf(&b, "| pickup p99, the same tasks | %s | %s | %s | | |\n",
			cell(p99["machinery"], "ms"), cell(p99["errand"], "ms"), ratioCell(p99["errand"], p99["machinery"]))
	}
	if sh := r.mq["share"]; sh != nil {
		met := "not met"
		if median(sh["errand"]) >= 30 && median(sh["machinery"]) >= 30 && slices.Min(sh["errand"]) >= 30 && slices.Min(sh["machinery"]) >= 30 {
			met = "met"
		}
		fmt.Fprintf(&b, "| fair share: %d tasks of 2 ms, both workers on one queue, 10 slots each (share of the tasks run) | %s | %s | | each ≥ 30%% in every round | %s |\n",
			mqShareN(), pct(sh["machinery"]), pct(sh["errand"]), met)
	}
	b.WriteString("\n")
	return b.String()
}

func pct(vs []float64) string {
	if len(vs) == 0 {
		return "–"
	}
	if len(vs) == 1 {
		return fmt.Sprintf("%.1f%%", vs[0])
	}
	return fmt.Sprintf("%.1f%% (%.1f–%.1f%%)", median(vs), slices.Min(vs), slices.Max(vs))
}

// Command bench runs errand's benchmark scenarios against its drivers and
// against raw floors (a plain Go channel pool; raw go-redis list operations;
// a raw SKIP LOCKED table on PostgreSQL) and peers (asynq, machinery,
// River) in the same run, and writes the results as docs/benchmarks.md.
//
//	scripts/services start && . .services/env
//	go run ./bench -out docs/benchmarks.md
//	go run ./bench -only postgres -peer soak   # the 10-minute PostgreSQL soak
//
// Every scenario checks that each task ran exactly once.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

var (
	out   = flag.String("out", "", "write the markdown report here (default: stdout)")
	n     = flag.Int("n", 20000, "tasks in enqueue and drain scenarios")
	quick = flag.Bool("quick", false, "small sizes, for a smoke run")
	only  = flag.String("only", "", "run only scenarios whose name contains this")
	cpu   = flag.String("cpuprofile", "", "write a CPU profile here")

	rounds       = flag.Int("rounds", 3, "interleaved rounds of the peer scenarios (medians reported)")
	latn         = flag.Int("latn", 2000, "tasks of the peer latency scenario (sent at 200/s)")
	subjectsFlag = flag.String("subjects", "", "peer subjects to run, comma-separated (raw,errand,asynq,machinery; -only postgres: raw,river,river-fast,errand; default all)")
	peerOnly     = flag.String("peer", "", "run only peer scenarios whose key contains this (drain10, drain50, enq1, enq10, mixed, latency, chord; -only postgres: also enqbatch, enqtx and soak, which runs only when named)")
	asynqCheck   = flag.Duration("asynqcheck", 10*time.Millisecond, "asynq TaskCheckInterval of the extra latency row (asynq's default is 1 s)")
	profileN     = flag.Int("profilen", 5000, "tasks per subject in the profile scenarios")
)

var began = time.Now()

func main() {
	flag.Parse()
	if *quick {
		*n = 2000
	}
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		fmt.Fprintln(os.Stderr, "bench: ERRAND_REDIS_URL is not set (scripts/services start, then . .services/env)")
		os.Exit(2)
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	o.PoolSize = 100
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	r := &report{rdb: rdb}
	if *cpu != "" {
		f, err := os.Create(*cpu)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	for _, s := range scenarios() {
		if !strings.Contains(s.name, *only) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s\n", s.name)
		if err := s.run(r); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.name, err)
			os.Exit(1)
		}
		if err := r.clean(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: cleaning up: %v\n", s.name, err)
			os.Exit(1)
		}
	}
	pprof.StopCPUProfile()
	md := r.markdown()
	if *out == "" {
		fmt.Print(md)
		return
	}
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type scenario struct {
	name string
	run  func(*report) error
}

type row struct {
	scenario, subject string
	value             float64
	unit              string
	floor             string  // subject of the floor row this one is compared with
	ratio             float64 // value / floor value (higher is better), 0 when not compared
	target            string
}

type report struct {
	rdb       *goredis.Client
	rows      []row
	peer      peerRuns
	amqp      peerRuns // the AMQP drains, by workers and subject
	amqpTotal int      // tasks per AMQP drain
	profile   []profileRun
	mq        mqRuns
	pg        peerRuns              // the PostgreSQL peers, by metric and subject
	pgSoak    []soakRun             // the PostgreSQL soaks
	pgCost    map[[2]string]*pgCost // by metric and subject
	pgEnv     []string              // the machine's load and the server's settings
	tc        *tcRuns               // the task-control rows (cancel.go)
}

// clean deletes every key the scenarios left on Redis (their prefixes all
// start with "bench-", hash-tagged or not), so that each scenario starts on
// a small dataset: a large one makes Redis's append-only file rewrites,
// which fork and copy it, land in the middle of later scenarios.
func (r *report) clean() error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	for _, pattern := range []string{"bench-*", "{bench-*", "asynq:{bench-*"} {
		iter := r.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 1000 {
				if err := r.rdb.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := r.rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *report) add(scenario, subject string, value float64, unit string) {
	r.rows = append(r.rows, row{scenario: scenario, subject: subject, value: value, unit: unit})
}

// compare records value and its ratio to the floor row of the same scenario.
func (r *report) compare(scenario, subject string, value float64, unit, floor, target string) {
	ratio := 0.0
	for _, x := range r.rows {
		if x.scenario == scenario && x.subject == floor && x.value > 0 {
			ratio = value / x.value
		}
	}
	r.rows = append(r.rows, row{scenario, subject, value, unit, floor, ratio, target})
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nGenerated by `go run ./bench` on %s: %d cores, %s, Redis on 127.0.0.1 (scripts/services). ",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(&b, "This run (flags: %q) took %s.\n\n", strings.Join(os.Args[1:], " "), time.Since(began).Round(time.Second))
	b.WriteString(r.peerMarkdown())
	b.WriteString(r.pgMarkdown())
	b.WriteString(r.mqMarkdown())
	b.WriteString(r.amqpMarkdown())
	b.WriteString(r.tcMarkdown())
	b.WriteString(r.profileMarkdown())
	b.WriteString("## errand against raw floors\n\n")
	fmt.Fprintf(&b, "Every scenario ran its raw floor in the same run and checked that each task ran exactly once. Throughputs: higher is better; ratio = errand / floor.\n\n")
	b.WriteString("| scenario | subject | result | vs floor | ratio | target |\n|---|---|---|---|---|---|\n")
	for _, x := range r.rows {
		ratio := ""
		if x.ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", x.ratio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s | %s | %s | %s |\n", x.scenario, x.subject, num(x.value), x.unit, x.floor, ratio, x.target)
	}
	b.WriteString(analysis)
	return b.String()
}

func num(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// once records task IDs and finds duplicates and losses.
type once struct {
	seen sync.Map
	dups atomic.Int64
	done atomic.Int64
	all  chan struct{}
	want int64
}

func newOnce(want int) *once { return &once{all: make(chan struct{}), want: int64(want)} }

func (o *once) mark(id any) {
	if _, dup := o.seen.LoadOrStore(id, true); dup {
		o.dups.Add(1)
		return
	}
	if o.done.Add(1) == o.want {
		close(o.all)
	}
}

func (o *once) wait(ctx context.Context) error {
	select {
	case <-o.all:
	case <-ctx.Done():
		return fmt.Errorf("only %d of %d tasks ran: %w", o.done.Load(), o.want, ctx.Err())
	}
	if d := o.dups.Load(); d > 0 {
		return fmt.Errorf("%d tasks ran more than once", d)
	}
	return nil
}

func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Minute)
}

// redisServer returns an errand server on the Redis broker and backend with
// a fresh prefix.
func redisServer(rdb *goredis.Client) *errand.Server {
	p := "bench-" + rand.Text()[:8]
	srv, _ := errand.NewServer(errand.Config{
		Broker:  redisbroker.New(rdb, &redisbroker.Options{Prefix: p}),
		Backend: redisbackend.New(rdb, &redisbackend.Options{Prefix: p, ResultExpiry: 10 * time.Minute}),
	})
	return srv
}

func rate(count int, d time.Duration) float64 { return float64(count) / d.Seconds() }

func percentiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99), ds[len(ds)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mtasks "github.com/RichardKnop/machinery/v2/tasks"
	"github.com/errand-go/errand"
)

// A peer metric is one row of the peer table: one scenario, measured on
// every subject in every round.
type peerMetric struct {
	key, label, unit string
	lower            bool // lower is better (times)
	target           string
	met              func(m map[string]float64) bool // medians by subject
}

// verdict is the table's "met" cell for runs (by subject, every round's
// value): "met" or "not met" by the medians, "" for a row without a
// target.
func (m peerMetric) verdict(runs map[string][]float64) string {
	if m.met == nil {
		return ""
	}
	meds := map[string]float64{}
	for s, vs := range runs {
		meds[s] = median(vs)
	}
	if m.met(meds) {
		return "met"
	}
	return "not met"
}

// peerMetrics are the rows of issue 23's table, in its order, with its
// targets.
func peerMetrics() []peerMetric {
	ratio := func(a, b string, min float64) func(map[string]float64) bool {
		return func(m map[string]float64) bool { return m[b] > 0 && m[a]/m[b] >= min }
	}
	return []peerMetric{
		{key: "drain10", label: fmt.Sprintf("drain %s, 10 workers", kn(*n)), unit: "tasks/s", target: "errand ≥ 1.5× asynq", met: ratio("errand", "asynq", 1.5)},
		{key: "drain50", label: fmt.Sprintf("drain %s, 50 workers", kn(*n)), unit: "tasks/s", target: "errand ≥ 1.5× asynq", met: ratio("errand", "asynq", 1.5)},
		{key: "enq1", label: fmt.Sprintf("enqueue %s, 1 producer", kn(*n)), unit: "tasks/s", target: "errand ≥ 1.2× asynq", met: ratio("errand", "asynq", 1.2)},
		{key: "enq10", label: fmt.Sprintf("enqueue %s, %d producers", kn(*n), producers), unit: "tasks/s", target: "errand ≥ 1.0× asynq", met: ratio("errand", "asynq", 1.0)},
		{key: "mixed", label: fmt.Sprintf("enqueue %s from 1 producer while 10 workers consume (first send → last handler start)", kn(*n)), unit: "tasks/s"},
		{key: "lat50", label: fmt.Sprintf("latency p50, %d tasks at 200/s to 10 idle workers (send → handler start)", latencyTotal()), unit: "ms", lower: true,
			target: "errand ≤ machinery and ≤ 0.5 ms",
			met:    func(m map[string]float64) bool { return m["errand"] <= m["machinery"] && m["errand"] <= 0.5 }},
		{key: "lat99", label: fmt.Sprintf("latency p99, %d tasks at 200/s to 10 idle workers", latencyTotal()), unit: "ms", lower: true,
			target: "errand ≤ 2 ms", met: func(m map[string]float64) bool { return m["errand"] <= 2 }},
		{key: "chord", label: fmt.Sprintf("chord of %d → callback start, 10 workers", chordSize()), unit: "ms", lower: true,
			target: "errand ≤ 2× raw", met: func(m map[string]float64) bool { return m["raw"] > 0 && m["errand"]/m["raw"] <= 2 }},
	}
}

func kn(v int) string {
	if v%1000 == 0 {
		return strconv.Itoa(v/1000) + "k"
	}
	return strconv.Itoa(v)
}

func latencyTotal() int {
	if *quick {
		return 400
	}
	return *latn
}

func chordSize() int {
	if *quick {
		return 100
	}
	return 1000
}

// asynqFast is the extra latency subject: asynq with TaskCheckInterval
// lowered from its 1 s default.
const asynqFast = "asynq-fast"

// peerRuns holds every round's value of every metric by subject.
type peerRuns map[string]map[string][]float64

func (p peerRuns) add(metric, subject string, v float64) {
	if p[metric] == nil {
		p[metric] = map[string][]float64{}
	}
	p[metric][subject] = append(p[metric][subject], v)
}

// peers runs issue 23's scenarios on raw go-redis, errand, asynq and
// machinery, *rounds times, each round over every scenario and every
// subject, the subjects' order reversed every other round, so that a load
// that comes and goes on the machine falls on all subjects alike.
func peers(r *report) error {
	subjects := peerSubjects()
	if *subjectsFlag != "" {
		subjects = slices.DeleteFunc(subjects, func(s subject) bool { return !strings.Contains(*subjectsFlag, s.name) })
	}
	type scen struct {
		name string
		run  func(ctx context.Context, r *report, s subject) error
	}
	scens := []scen{
		{"drain10", func(ctx context.Context, r *report, s subject) error { return peerDrain(ctx, r, s, 10, "drain10") }},
		{"drain50", func(ctx context.Context, r *report, s subject) error { return peerDrain(ctx, r, s, 50, "drain50") }},
		{"enq1", func(ctx context.Context, r *report, s subject) error { return peerEnqueue(ctx, r, s, 1, "enq1") }},
		{"enq10", func(ctx context.Context, r *report, s subject) error {
			return peerEnqueue(ctx, r, s, producers, "enq10")
		}},
		{"mixed", peerMixed},
		{"latency", peerLatency},
		{"chord", peerChord},
	}
	if r.peer == nil {
		r.peer = peerRuns{}
	}
	g0 := runtime.NumGoroutine()
	for round := range *rounds {
		for _, sc := range scens {
			if *peerOnly != "" && !strings.Contains(sc.name, *peerOnly) {
				continue
			}
			order := slices.Clone(subjects)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			if sc.name == "latency" && slices.ContainsFunc(order, func(s subject) bool { return s.name == "asynq" }) {
				order = append(order, subject{asynqFast, func(r *report) (peer, error) { return newAsynqPeer(r, *asynqCheck) }})
			}
			for _, s := range order {
				if sc.name == "chord" && s.name == "asynq" {
					continue // asynq has no chord
				}
				fmt.Fprintf(os.Stderr, "bench: peers round %d: %s: %s\n", round+1, sc.name, s.name)
				ctx, cancel := ctxTimeout()
				err := sc.run(ctx, r, s)
				cancel()
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", round+1, sc.name, s.name, err)
				}
				if err := r.clean(); err != nil {
					return err
				}
			}
		}
	}
	// Every peer's goroutines are gone, except machinery's: its Server
	// starts a cron scheduler goroutine that nothing stops (idle, blocked on
	// a timer).
	if g := runtime.NumGoroutine(); g > g0 {
		fmt.Fprintf(os.Stderr, "bench: peers: %d goroutines before, %d after (machinery leaves one idle cron goroutine per Server)\n", g0, g)
		if os.Getenv("BENCH_GOROUTINES") != "" {
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		}
	}
	return nil
}

func peerDrain(ctx context.Context, r *report, s subject, w int, metric string) error {
	p, err := s.open(r)
	if err != nil {
		return err
	}
	defer p.stop()
	d, err := drainOn(ctx, p, *n, w, nil)
	if err != nil {
		return err
	}
	r.peer.add(metric, s.name, rate(*n, d))
	return nil
}

// drainOn preloads total tasks on p, then starts w workers and waits until
// every task's handler ran once. around, if not nil, is called just before
// the start and just after the last handler (profiling).
func drainOn(ctx context.Context, p peer, total, w int, around func(end bool)) (time.Duration, error) {
	if err := p.preload(ctx, total); err != nil {
		return 0, err
	}
	if around != nil {
		around(false)
	}
	o := newOnce(total)
	t0 := time.Now()
	if err := p.start(w, func(id, _ int64) { o.mark(id) }); err != nil {
		return 0, err
	}
	err := o.wait(ctx)
	d := time.Since(t0)
	if around != nil {
		around(true)
	}
	return d, err
}

func peerEnqueue(ctx context.Context, r *report, s subject, prods int, metric string) error {
	p, err := s.open(r)
	if err != nil {
		return err
	}
	defer p.stop()
	d, err := enqueueOn(ctx, p, *n, prods, nil)
	if err != nil {
		return err
	}
	r.peer.add(metric, s.name, rate(*n, d))
	return nil
}

// enqueueOn sends total tasks to p from prods goroutines and checks that the
// queue then holds each once.
func enqueueOn(ctx context.Context, p peer, total, prods int, around func(end bool)) (time.Duration, error) {
	if around != nil {
		around(false)
	}
	t0 := time.Now()
	if err := concurrentlyN(total, prods, func(i int) error { return p.send(ctx, int64(i), 0) }); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if around != nil {
		around(true)
	}
	q, err := p.pending(ctx)
	if err != nil {
		return 0, err
	}
	if q != total {
		return 0, fmt.Errorf("%d tasks sent left %d on the queue, want each once", total, q)
	}
	return d, nil
}

func peerMixed(ctx context.Context, r *report, s subject) error {
	p, err := s.open(r)
	if err != nil {
		return err
	}
	defer p.stop()
	d, err := mixedOn(ctx, p, *n, nil)
	if err != nil {
		return err
	}
	r.peer.add("mixed", s.name, rate(*n, d))
	return nil
}

// mixedOn starts 10 workers on p, sends total tasks from one goroutine and
// returns the time from the first send to the last handler start.
func mixedOn(ctx context.Context, p peer, total int, around func(end bool)) (time.Duration, error) {
	o := newOnce(total)
	if err := p.start(10, func(id, _ int64) { o.mark(id) }); err != nil {
		return 0, err
	}
	if around != nil {
		around(false)
	}
	t0 := time.Now()
	for i := range total {
		if err := p.send(ctx, int64(i), 0); err != nil {
			return 0, err
		}
	}
	if err := o.wait(ctx); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if around != nil {
		around(true)
	}
	return d, nil
}

func peerLatency(ctx context.Context, r *report, s subject) error {
	p, err := s.open(r)
	if err != nil {
		return err
	}
	defer p.stop()
	p50, p99, err := latencyOnPeer(ctx, p, latencyTotal())
	if err != nil {
		return err
	}
	r.peer.add("lat50", s.name, ms(p50))
	r.peer.add("lat99", s.name, ms(p99))
	return nil
}

// latencyOnPeer starts 10 workers on p, sends total tasks at 200/s and
// returns the p50 and p99 of the time from send to handler start.
func latencyOnPeer(ctx context.Context, p peer, total int) (p50, p99 time.Duration, err error) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, total)
	o := newOnce(total)
	if err := p.start(10, func(id, sent int64) {
		d := time.Since(time.Unix(0, sent))
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		o.mark(id)
	}); err != nil {
		return 0, 0, err
	}
	tick := time.NewTicker(5 * time.Millisecond) // 200/s
	defer tick.Stop()
	for i := range total {
		<-tick.C
		if err := p.send(ctx, int64(i), time.Now().UnixNano()); err != nil {
			return 0, 0, err
		}
	}
	if err := o.wait(ctx); err != nil {
		return 0, 0, err
	}
	p50, p99, _ = percentiles(lat)
	return p50, p99, nil
}

func peerChord(ctx context.Context, r *report, s subject) error {
	size := chordSize()
	var d time.Duration
	var err error
	switch s.name {
	case "raw":
		d, err = rawChord(ctx, r, size)
	case "errand":
		d, err = errandChord(ctx, r, size)
	case "machinery":
		d, err = machineryChord(ctx, r, size)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	r.peer.add("chord", s.name, ms(d))
	return nil
}

// rawChord: members on a list, 10 BRPOP workers, a DECR counter; the member
// that takes it to zero pushes the callback, and the clock stops when the
// callback is popped.
func rawChord(ctx context.Context, r *report, size int) (time.Duration, error) {
	t := token("raw")
	q, cb, counter := t+":q", t+":cb", t+":n"
	o := newOnce(size)
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range 10 {
		wg.Go(func() {
			for dctx.Err() == nil {
				v, err := r.rdb.BRPop(dctx, time.Second, q).Result()
				if err != nil {
					continue
				}
				o.mark(v[1])
				if left, _ := r.rdb.Decr(dctx, counter).Result(); left == 0 {
					r.rdb.LPush(dctx, cb, "go")
				}
			}
		})
	}
	t0 := time.Now()
	pipe := r.rdb.Pipeline()
	pipe.Set(ctx, counter, size, 0)
	for i := range size {
		pipe.LPush(ctx, q, rawPayload(int64(i), 0))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	if _, err := r.rdb.BRPop(ctx, time.Minute, cb).Result(); err != nil {
		return 0, fmt.Errorf("raw chord callback: %w", err)
	}
	d := time.Since(t0)
	return d, o.wait(ctx)
}

// errandChord: members take the five arguments and return one int; the
// callback gets the members' results (errand's chord always passes them).
func errandChord(ctx context.Context, r *report, size int) (time.Duration, error) {
	return errandChordOn(ctx, newErrandPeer(r.rdb).srv, size)
}

// errandChordOn runs errandChord's chord on srv.
func errandChordOn(ctx context.Context, srv *errand.Server, size int) (time.Duration, error) {
	o := newOnce(size)
	fired := make(chan time.Time, 2)
	srv.Register("member", func(id, _, _, _, _ int64) (int64, error) { o.mark(id); return id, nil })
	srv.Register("callback", func(xs ...int64) error {
		fired <- time.Now()
		if len(xs) != size {
			return fmt.Errorf("callback got %d results", len(xs))
		}
		return nil
	})
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
	wk.Start()
	defer wk.Shutdown(context.Background())
	sigs := make([]*errand.Signature, size)
	for i := range sigs {
		sigs[i] = errand.NewSignature("member", int64(i), int64(0), int64(3), int64(4), int64(5))
	}
	g, _ := errand.NewGroup(sigs...)
	c, _ := errand.NewChord(g, errand.NewSignature("callback"))
	t0 := time.Now()
	res, err := srv.SendChord(ctx, c, errand.SendConcurrency(4))
	if err != nil {
		return 0, err
	}
	var at time.Time
	select {
	case at = <-fired:
	case <-ctx.Done():
		return 0, fmt.Errorf("chord callback never ran")
	}
	if _, err := res.Get(ctx); err != nil {
		return 0, err
	}
	if err := o.wait(ctx); err != nil {
		return 0, err
	}
	if len(fired) != 0 {
		return 0, fmt.Errorf("chord callback ran twice")
	}
	return at.Sub(t0), nil
}

// machineryChord: machinery's SendChordWithContext with 4 sending
// goroutines (as errand's SendConcurrency(4)); the members take the five
// arguments and return only an error, and the callback is immutable (it
// takes no results: machinery passes members' results as arguments, which
// a no-result member does not have).
func machineryChord(ctx context.Context, r *report, size int) (time.Duration, error) {
	p, _ := newMachineryPeer(r)
	o := newOnce(size)
	var fires atomic.Int64
	fired := make(chan time.Time, 2)
	if err := p.serve(10, map[string]any{
		"member":   func(id, _, _, _, _ int64) error { o.mark(id); return nil },
		"callback": func() error { fires.Add(1); fired <- time.Now(); return nil },
	}); err != nil {
		return 0, err
	}
	defer p.stop()
	sigs := make([]*mtasks.Signature, size)
	for i := range sigs {
		sigs[i] = p.sig(int64(i), 0)
		sigs[i].Name = "member"
	}
	g, _ := mtasks.NewGroup(sigs...)
	g.GroupUUID = p.q + ":group"
	for _, s := range sigs {
		s.GroupUUID = g.GroupUUID
	}
	cb := &mtasks.Signature{UUID: p.q + ":callback", Name: "callback", RoutingKey: p.q, Immutable: true}
	c, _ := mtasks.NewChord(g, cb)
	t0 := time.Now()
	if _, err := machineryShared.producer.SendChordWithContext(ctx, c, 4); err != nil {
		return 0, err
	}
	var at time.Time
	select {
	case at = <-fired:
	case <-ctx.Done():
		return 0, fmt.Errorf("machinery chord callback never ran (%d of %d members ran)", o.done.Load(), size)
	}
	if err := o.wait(ctx); err != nil {
		return 0, err
	}
	if fires.Load() != 1 {
		return 0, fmt.Errorf("machinery chord callback ran %d times", fires.Load())
	}
	return at.Sub(t0), nil
}

// concurrentlyN runs send(0..count-1) on prods goroutines.
func concurrentlyN(count, prods int, send func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, prods)
	for range prods {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < count; i = int(next.Add(1)) - 1 {
				if err := send(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cell prints a metric's median and, over several rounds, its range.
func cell(vs []float64, unit string) string {
	if len(vs) == 0 {
		return "–"
	}
	u := ""
	if unit == "ms" {
		u = " ms"
	} else {
		u = "/s"
	}
	m := median(vs)
	if len(vs) == 1 {
		return short(m, unit) + u
	}
	return fmt.Sprintf("%s%s (%s–%s)", short(m, unit), u, short(slices.Min(vs), unit), short(slices.Max(vs), unit))
}

func short(v float64, unit string) string {
	if unit != "ms" && v >= 1000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return num(v)
}

// ratioCell prints errand ÷ peer from the medians and the range of the
// per-round ratios (subjects of a round ran side by side).
func ratioCell(a, b []float64) string {
	if len(a) == 0 || len(b) == 0 || median(b) == 0 {
		return "–"
	}
	s := fmt.Sprintf("%.2f×", median(a)/median(b))
	if k := min(len(a), len(b)); k > 1 {
		rs := make([]float64, k)
		for i := range k {
			rs[i] = a[i] / b[i]
		}
		s += fmt.Sprintf(" (%.2f–%.2f)", slices.Min(rs), slices.Max(rs))
	}
	return s
}

func (r *report) peerMarkdown() string {
	if len(r.peer) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## errand beside asynq and machinery (issue 23)\n\n")
	fmt.Fprintf(&b, "asynq v0.26.0, machinery v2.0.16 (go-redis broker and backend) and raw go-redis on the same Redis in this run: %d interleaved rounds (every scenario on every subject each round, the subjects' order reversed every other round); each cell is the median, with the range over the rounds in brackets. Same payload (five int64 arguments), same no-op handler, every task checked to run exactly once (enqueue rows: the queue then held each task once). Ratios are errand ÷ the other subject (throughputs: higher is better; times: lower is better), from the medians, with the per-round range. Raw floors: reliable BLMOVE + LREM (drains, consuming), LPUSH (enqueue), LPUSH → BLMOVE (latency), a DECR-counter chord. asynq has no chord.\n\n", *rounds)
	b.WriteString("| scenario | raw floor | asynq | machinery | errand | errand ÷ asynq | errand ÷ machinery | errand ÷ raw | target | met |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range peerMetrics() {
		runs := r.peer[m.key]
		if runs == nil {
			continue
		}
		met := m.verdict(runs)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.label,
			cell(runs["raw"], m.unit), cell(runs["asynq"], m.unit), cell(runs["machinery"], m.unit), cell(runs["errand"], m.unit),
			ratioCell(runs["errand"], runs["asynq"]), ratioCell(runs["errand"], runs["machinery"]), ratioCell(runs["errand"], runs["raw"]),
			m.target, met)
	}
	if f := r.peer["lat50"][asynqFast]; len(f) > 0 {
		fmt.Fprintf(&b, "\nasynq's latency above is at its default TaskCheckInterval (1 s): a worker that finds every queue empty sleeps that long before it looks again, so at 200/s tasks wait for the next look. With TaskCheckInterval %v (same run, same rounds): p50 %s, p99 %s.\n",
			*asynqCheck, cell(f, "ms"), cell(r.peer["lat99"][asynqFast], "ms"))
	}
	b.WriteString("\n")
	return b.String()
}

// producers is the number of goroutines of the concurrent enqueue
// scenario: a web server's request handlers sending at once.
const producers = 10

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	pgn         = flag.Int("pgn", 0, "tasks in the PostgreSQL drain and enqueue scenarios (default: -n)")
	soakFor     = flag.Duration("soak", 10*time.Minute, "length of the PostgreSQL soak (runs only when -peer names it: -only postgres -peer soak)")
	soakRate    = flag.Int("soakrate", 1000, "tasks/s sent during the PostgreSQL soak")
	soakExpiry  = flag.Duration("soakexpiry", time.Minute, "errand's ResultExpiry in the PostgreSQL soak")
	riverCool   = flag.Duration("rivercooldown", time.Millisecond, "River FetchCooldown of the river-fast subject (River's default is 100 ms)")
	pgBatchSize = 100
)

// pgTotal is the tasks of the drains and enqueues: 5000 by default, not
// -n, since River at its defaults drains 10 workers at about 100 tasks/s
// (MaxWorkers ÷ FetchCooldown).
func pgTotal() int {
	switch {
	case *pgn > 0:
		return *pgn
	case *quick:
		return 2000
	}
	return 5000
}

func pgSubjects() []pgSubject {
	return []pgSubject{
		{"raw", newRawPGPeer},
		{"river", func(ctx context.Context) (pgPeer, error) { return newRiverPeer(ctx, 0) }},
		{"river-fast", func(ctx context.Context) (pgPeer, error) { return newRiverPeer(ctx, *riverCool) }},
		{"errand", newErrandPGPeer},
	}
}

// pgMetrics are the rows of issue 33's table, with its targets: drain and
// enqueue ≥ 1.0× River, latency p50 ≤ River's.
func pgMetrics() []peerMetric {
	// The targets hold against River at its defaults and, where it ran,
	// with FetchCooldown lowered.
	vsRiver := func(m map[string]float64) bool {
		return m["river"] > 0 && m["errand"]/m["river"] >= 1.0 && (m["river-fast"] == 0 || m["errand"]/m["river-fast"] >= 1.0)
	}
	tgt := "errand ≥ 1.0× River (both configs)"
	total := pgTotal()
	return []peerMetric{
		{key: "drain10", label: fmt.Sprintf("drain %s, 10 workers", kn(total)), unit: "tasks/s", target: tgt, met: vsRiver},
		{key: "drain50", label: fmt.Sprintf("drain %s, 50 workers", kn(total)), unit: "tasks/s", target: tgt, met: vsRiver},
		{key: "enq1", label: fmt.Sprintf("enqueue %s, one at a time, 1 producer", kn(total)), unit: "tasks/s", target: tgt, met: vsRiver},
		{key: "enq10", label: fmt.Sprintf("enqueue %s, one at a time, %d producers", kn(total), producers), unit: "tasks/s", target: tgt, met: vsRiver},
		{key: "enqbatch", label: fmt.Sprintf("enqueue %s in batches of %d, 1 producer (SendGroup / InsertMany / multi-row INSERT)", kn(total), pgBatchSize), unit: "tasks/s", target: tgt, met: vsRiver},
		{key: "enqtx", label: fmt.Sprintf("enqueue %s, each in a transaction of its own (BEGIN, send, COMMIT), %d producers (WithTx + SendTask / InsertTx / INSERT)", kn(total), producers), unit: "tasks/s", target: tgt, met: vsRiver},
		{key: "lat50", label: fmt.Sprintf("latency p50, %d tasks at 200/s to 10 idle workers (send → handler start)", latencyTotal()), unit: "ms", lower: true,
			target: "errand ≤ River (both configs)", met: func(m map[string]float64) bool {
				return m["river"] > 0 && m["errand"] <= m["river"] && (m["river-fast"] == 0 || m["errand"] <= m["river-fast"])
			}},
		{key: "lat99", label: fmt.Sprintf("latency p99, %d tasks at 200/s to 10 idle workers", latencyTotal()), unit: "ms", lower: true},
		{key: "chord", label: fmt.Sprintf("chord of %d → callback start, 10 workers (raw and River: a counter row, see below)", chordSize()), unit: "ms", lower: true},
	}
}

// pgPeers runs the PostgreSQL peer scenarios, *rounds interleaved rounds
// like peers, and the soak (once, only when -peer names it).
func pgPeers(r *report) error {
	if os.Getenv("ERRAND_POSTGRES_URL") == "" {
		fmt.Fprintln(os.Stderr, "bench: postgres: ERRAND_POSTGRES_URL is not set; skipping the PostgreSQL peers")
		return nil
	}
	subjects := pgSubjects()
	if *subjectsFlag != "" {
		// By exact name: "river" is not "river-fast".
		names := strings.Split(*subjectsFlag, ",")
		subjects = slices.DeleteFunc(subjects, func(s pgSubject) bool { return !slices.Contains(names, s.name) })
	}
	total := pgTotal()
	type scen struct {
		name string
		run  func(ctx context.Context, r *report, s pgSubject) error
	}
	scens := []scen{
		{"drain10", func(ctx context.Context, r *report, s pgSubject) error {
			return pgDrain(ctx, r, s, total, 10, "drain10")
		}},
		{"drain50", func(ctx context.Context, r *report, s pgSubject) error {
			return pgDrain(ctx, r, s, total, 50, "drain50")
		}},
		{"enq1", func(ctx context.Context, r *report, s pgSubject) error {
			return pgEnqueue(ctx, r, s, "enq1", total, func(ctx context.Context, p pgPeer) error {
				return concurrentlyN(total, 1, func(i int) error { return p.send(ctx, int64(i), 0) })
			})
		}},
		{"enq10", func(ctx context.Context, r *report, s pgSubject) error {
			return pgEnqueue(ctx, r, s, "enq10", total, func(ctx context.Context, p pgPeer) error {
				return concurrentlyN(total, producers, func(i int) error { return p.send(ctx, int64(i), 0) })
			})
		}},
		{"enqbatch", func(ctx context.Context, r *report, s pgSubject) error {
			return pgEnqueue(ctx, r, s, "enqbatch", total, func(ctx context.Context, p pgPeer) error {
				for i := 0; i < total; i += pgBatchSize {
					if err := p.sendBatch(ctx, i, min(pgBatchSize, total-i)); err != nil {
						return err
					}
				}
				return nil
			})
		}},
		{"enqtx", func(ctx context.Context, r *report, s pgSubject) error {
			return pgEnqueue(ctx, r, s, "enqtx", total, func(ctx context.Context, p pgPeer) error {
				pool, _ := p.db()
				return concurrentlyN(total, producers, func(i int) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return p.sendTx(ctx, tx, int64(i), 0) })
				})
			})
		}},
		{"latency", pgLatency},
		{"chord", pgChord},
		{"soak", pgSoak},
	}
	if r.pg == nil {
		r.pg = peerRuns{}
	}
	r.pgEnv = append(r.pgEnv, "at the start: "+pgLoad())
	defer func() { r.pgEnv = append(r.pgEnv, "at the end: "+pgLoad()) }()
	for round := range *rounds {
		for _, sc := range scens {
			if *peerOnly != "" && !strings.Contains(sc.name, *peerOnly) {
				continue
			}
			if sc.name == "soak" && (*peerOnly == "" || round > 0) {
				continue // opt-in (-peer soak), and once
			}
			order := slices.Clone(subjects)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			if strings.HasPrefix(sc.name, "enq") {
				// FetchCooldown is a worker's setting: River's inserts are
				// the same in both configs.
				order = slices.DeleteFunc(order, func(s pgSubject) bool { return s.name == "river-fast" })
			}
			if sc.name == "soak" && *subjectsFlag == "" {
				order = slices.DeleteFunc(order, func(s pgSubject) bool { return s.name != "errand" })
			}
			for _, s := range order {
				fmt.Fprintf(os.Stderr, "bench: postgres round %d: %s: %s\n", round+1, sc.name, s.name)
				ctx, cancel := ctxTimeout()
				var err error
				// Labels let a CPU profile (-cpuprofile) be split by
				// subject and scenario: go tool pprof -tagfocus subject=errand.
				pprof.Do(ctx, pprof.Labels("subject", s.name, "scenario", sc.name), func(ctx context.Context) {
					err = sc.run(ctx, r, s)
				})
				cancel()
				if err != nil {
					return fmt.Errorf("postgres round %d, %s, %s: %w", round+1, sc.name, s.name, err)
				}
			}
		}
	}
	return nil
}

// pgLoad describes the machine's load and the server's other clients now,
// and the server's settings that bear on the numbers.
func pgLoad() string {
	la, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(la))
	if len(f) > 3 {
		f = f[:3]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, os.Getenv("ERRAND_POSTGRES_URL"))
	if err != nil {
		return fmt.Sprintf("load average %s; PostgreSQL: %v", strings.Join(f, " "), err)
	}
	defer conn.Close(ctx)
	var others, active int
	var fsync, sync, buffers, av string
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'active'),
	current_setting('fsync'), current_setting('synchronous_commit'), current_setting('shared_buffers'), current_setting('autovacuum')
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&others, &active, &fsync, &sync, &buffers, &av)
	if err != nil {
		return fmt.Sprintf("load average %s; PostgreSQL: %v", strings.Join(f, " "), err)
	}
	return fmt.Sprintf("load average %s (1, 5, 15 min) on %d cores; %d other client connections on the server (%d active); fsync %s, synchronous_commit %s, shared_buffers %s, autovacuum %s",
		strings.Join(f, " "), runtime.NumCPU(), others, active, fsync, sync, buffers, av)
}

func pgDrain(ctx context.Context, r *report, s pgSubject, total, w int, metric string) error {
	p, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer p.stop()
	d, err := drainOn(ctx, p, total, w, r.meter(metric, s.name, total, p).around)
	if err != nil {
		return err
	}
	r.pg.add(metric, s.name, rate(total, d))
	return nil
}

// pgEnqueue times send on a fresh peer and checks that the queue then
// holds each of the total tasks once.
func pgEnqueue(ctx context.Context, r *report, s pgSubject, metric string, total int, send func(ctx context.Context, p pgPeer) error) error {
	p, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer p.stop()
	m := r.meter(metric, s.name, total, p)
	m.begin()
	t0 := time.Now()
	if err := send(ctx, p); err != nil {
		return err
	}
	d := time.Since(t0)
	m.end()
	q, err := p.pending(ctx)
	if err != nil {
		return err
	}
	if q != total {
		return fmt.Errorf("%d tasks sent left %d on the queue, want each once", total, q)
	}
	r.pg.add(metric, s.name, rate(total, d))
	return nil
}

func pgLatency(ctx context.Context, r *report, s pgSubject) error {
	p, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer p.stop()
	m := r.meter("lat50", s.name, latencyTotal(), p)
	m.begin()
	p50, p99, err := latencyOnPeer(ctx, p, latencyTotal())
	if err != nil {
		return err
	}
	m.end()
	r.pg.add("lat50", s.name, ms(p50))
	r.pg.add("lat99", s.name, ms(p99))
	return nil
}

func pgChord(ctx context.Context, r *report, s pgSubject) error {
	p, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer p.stop()
	var d time.Duration
	m := r.meter("chord", s.name, chordSize(), p)
	m.begin()
	if e, ok := p.(*errandPGPeer); ok {
		d, err = errandChordOn(ctx, e.srv, chordSize())
	} else {
		d, err = counterChord(ctx, p, chordSize())
	}
	if err != nil {
		return err
	}
	m.end()
	r.pg.add("chord", s.name, ms(d))
	return nil
}

// counterChord models a chord where the subject has none (raw, River): a
// counter row set to size, the members sent in batches of 100 (4 batches
// in flight, as errand's SendConcurrency(4)); each member's handler
// decrements the counter (UPDATE ... RETURNING, its own statement, not
// atomic with the member's completion) and the one that takes it to zero
// sends the callback (id -1). The clock stops when the callback's handler
// starts.
func counterChord(ctx context.Context, p pgPeer, size int) (time.Duration, error) {
	pool, schema := p.db()
	counter := pgx.Identifier{schema}.Sanitize() + ".chord"
	o := newOnce(size)
	fired := make(chan time.Time, 2)
	var fires atomic.Int64
	var errs atomic.Pointer[error]
	if err := p.start(10, func(id, _ int64) {
		if id == -1 {
			fires.Add(1)
			fired <- time.Now()
			return
		}
		o.mark(id)
		var left int
		err := pool.QueryRow(ctx, "UPDATE "+counter+" SET n = n - 1 RETURNING n").Scan(&left)
		if err == nil && left == 0 {
			err = p.send(ctx, -1, 0)
		}
		if err != nil {
			errs.Store(&err)
		}
	}); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if _, err := pool.Exec(ctx, "INSERT INTO "+counter+" (n) VALUES ($1)", size); err != nil {
		return 0, err
	}
	batches := (size + 99) / 100
	if err := concurrentlyN(batches, 4, func(b int) error { return p.sendBatch(ctx, b*100, min(100, size-b*100)) }); err != nil {
		return 0, err
	}
	var at time.Time
	select {
	case at = <-fired:
	case <-ctx.Done():
		if e := errs.Load(); e != nil {
			return 0, *e
		}
		return 0, fmt.Errorf("counter chord callback never ran (%d of %d members ran)", o.done.Load(), size)
	}
	if err := o.wait(ctx); err != nil {
		return 0, err
	}
	if n := fires.Load(); n != 1 {
		return 0, fmt.Errorf("counter chord callback ran %d times", n)
	}
	return at.Sub(t0), nil
}

// A soakSample is the subject's tables at one moment of the soak.
type soakSample struct {
	at                     time.Duration
	sent, done             int64
	bytes, dead, live, avs int64
}

type soakRun struct {
	subject string
	rate    int
	dur     time.Duration
	total   int
	samples []soakSample
	tables  []string // each table at the end: heap and index sizes, dead tuples, autovacuums
	failed  string   // why not every task ran once, if so
}

// pgSoak sends *soakRate tasks/s for *soakFor from 4 producers to 10
// workers, and samples the subject's tables every twentieth of the run
// (20 s for 10 minutes): their total size (pg_total_relation_size: heap,
// indexes, TOAST) and dead and live tuples and autovacuum runs
// (pg_stat_user_tables), autovacuum at the server's defaults. Then it
// waits for every task to run once and samples once more.
func pgSoak(_ context.Context, r *report, s pgSubject) error {
	dur, rps := *soakFor, *soakRate
	total := int(float64(rps) * dur.Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()
	open := s.open
	if s.name == "errand" {
		// States expire within the run, so that retention's steady state
		// shows.
		open = func(ctx context.Context) (pgPeer, error) { return openErrandPG(ctx, *soakExpiry) }
	}
	p, err := open(ctx)
	if err != nil {
		return err
	}
	defer p.stop()
	pool, schema := p.db()
	o := newOnce(total)
	if err := p.start(10, func(id, _ int64) { o.mark(id) }); err != nil {
		return err
	}
	run := soakRun{subject: s.name, rate: rps, dur: dur, total: total}
	var sent atomic.Int64
	t0 := time.Now()
	sample := func() error {
		x := soakSample{at: time.Since(t0), sent: sent.Load(), done: o.done.Load()}
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint,
	coalesce(sum(n_live_tup), 0)::bigint, coalesce(sum(autovacuum_count), 0)::bigint
FROM pg_stat_user_tables WHERE schemaname = $1`, schema).Scan(&x.bytes, &x.dead, &x.live, &x.avs)
		run.samples = append(run.samples, x)
		fmt.Fprintf(os.Stderr, "bench: soak %s: %s: sent %d, ran %d, %d kB, %d dead, %d live tuples, %d autovacuums\n",
			s.name, x.at.Round(time.Second), x.sent, x.done, x.bytes/1024, x.dead, x.live, x.avs)
		return err
	}
	if err := sample(); err != nil {
		return err
	}
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() {
		tick := time.NewTicker(dur / 20)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if err := sample(); err != nil && serr == nil {
					serr = err
				}
			case <-sctx.Done():
				return
			}
		}
	})
	// Task i is due at t0 + i/rps; 4 producers take the next one and wait
	// for its time (pacing, not waiting for an event).
	var next atomic.Int64
	perr := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(total); i = next.Add(1) - 1 {
				if d := time.Until(t0.Add(time.Duration(i) * time.Second / time.Duration(rps))); d > 0 {
					time.Sleep(d)
				}
				if err := p.send(ctx, i, 0); err != nil {
					perr <- err
					return
				}
				sent.Add(1)
			}
		})
	}
	// Sending ends at dur; the workers get 3 minutes more to catch up.
	wctx, wcancel := context.WithTimeout(ctx, dur+3*time.Minute-time.Since(t0))
	err = o.wait(wctx)
	wcancel()
	stopSampling()
	wg.Wait()
	close(perr)
	if e := <-perr; e != nil {
		return e
	}
	if serr != nil {
		return serr
	}
	if err != nil {
		// Recorded, not fatal: the samples show how far behind it fell.
		run.failed = err.Error()
		fmt.Fprintf(os.Stderr, "bench: soak %s: %v\n", s.name, err)
	}
	if err := sample(); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), n_dead_tup, autovacuum_count
FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY pg_total_relation_size(relid) DESC`, schema)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		var heap, idx, dead, avs int64
		if err := rows.Scan(&name, &heap, &idx, &dead, &avs); err != nil {
			return err
		}
		run.tables = append(run.tables, fmt.Sprintf("%s: heap %.1f MB, indexes %.1f MB, %d dead tuples, %d autovacuums", name, float64(heap)/(1<<20), float64(idx)/(1<<20), dead, avs))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.pgSoak = append(r.pgSoak, run)
	return nil
}

func (r *report) pgMarkdown() string {
	if len(r.pg) == 0 && len(r.pgSoak) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## PostgreSQL\n\nerrand beside River and a raw SKIP LOCKED floor (issue 33).\n\n")
	if len(r.pg) > 0 {
		fmt.Fprintf(&b, "`go run ./bench -only postgres`: errand's PostgreSQL broker and backend (one pool, one schema: co-located), River v0.51.2 (riverpgxv5, its tables made by rivermigrate) and a raw SKIP LOCKED queue on the same PostgreSQL 15 (scripts/services' private cluster) in this run, each subject on a fresh schema and a pool of its own (%d connections): %d interleaved rounds (the subjects' order reversed every other round); each cell is the median, with the range over the rounds in brackets. Same payload (five int64 arguments), same no-op handler, every task checked to run exactly once (enqueue rows: the queue then held each task once). Ratios are errand ÷ the other subject (throughputs: higher is better; times: lower is better), from the medians, with the per-round range.\n\n", pgMaxConns, *rounds)
		b.WriteString("Subjects. **raw**: one table (id bigserial, payload jsonb, leased_until) with a statement-level trigger that NOTIFYs after each INSERT; one fetcher claims as many rows as there are idle workers (`UPDATE ... SET leased_until = now() + 30 s WHERE id IN (SELECT id ... WHERE leased_until < now() ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING`), each worker runs the handler and DELETEs its row; an empty claim waits for a notification (1 s at most). At-least-once, no priorities, no delays, no retries, no states: the least a hand-written queue needs. **River**: every Config field at its default but the queue's MaxWorkers (= the workers), Workers, Schema and the logger; its default FetchCooldown (100 ms) caps a client's fetches at ten a second, so a 10-worker drain runs about 100 tasks/s; the second River column is the same client with FetchCooldown " + riverCool.String() + " (its minimum), where fetches follow LISTEN/NOTIFY. River keeps completed jobs 24 h (CompletedJobRetentionPeriod); errand's broker deletes a message at its ack and its backend keeps the state (errand's result expiry, 10 min here). **errand**: the broker's and backend's defaults but the schema and a 10-minute result expiry; batches are one SendGroup of 100, a transaction's send is `SendTask(WithTx(ctx, tx), sig)`. The chord rows of raw and River model a chord, which neither has, as a counter row: each member's handler decrements it (`UPDATE ... SET n = n - 1 RETURNING n`, its own statement, not atomic with the member's completion) and the one that takes it to zero sends the callback; errand's chord is SendChord with its exactly-once claim in the backend.\n\n")
		b.WriteString("The machine and the server during the run (2 cores shared with other engineers' builds and tests on the same PostgreSQL, Redis and RabbitMQ; the range in brackets is the noise):\n\n")
		for _, e := range r.pgEnv {
			b.WriteString("- " + e + "\n")
		}
		b.WriteString("\n")
		b.WriteString("| scenario | raw floor | River | River, FetchCooldown " + riverCool.String() + " | errand | errand ÷ River | errand ÷ River, FetchCooldown " + riverCool.String() + " | errand ÷ raw | target | met |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, m := range pgMetrics() {
			runs := r.pg[m.key]
			if runs == nil {
				continue
			}
			met := m.verdict(runs)
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.label,
				cell(runs["raw"], m.unit), cell(runs["river"], m.unit), cell(runs["river-fast"], m.unit), cell(runs["errand"], m.unit),
				ratioCell(runs["errand"], runs["river"]), ratioCell(runs["errand"], runs["river-fast"]), ratioCell(runs["errand"], runs["raw"]), m.target, met)
		}
		b.WriteString("\n")
		b.WriteString(r.pgCostMarkdown())
	}
	for _, s := range r.pgSoak {
		fmt.Fprintf(&b, "Soak, %s: %d tasks/s for %v (%d tasks, 4 producers, 10 workers), autovacuum at the server's defaults, errand's result expiry %v (-soakexpiry); the subject's tables (every table of its schema) sampled every %v, and once more at the end:\n\n",
			s.subject, s.rate, s.dur, s.total, *soakExpiry, s.dur/20)
		b.WriteString("| at | sent | ran | total relation size | dead tuples | live tuples | autovacuums |\n|---|---|---|---|---|---|---|\n")
		for _, x := range s.samples {
			fmt.Fprintf(&b, "| %v | %d | %d | %.1f MB | %d | %d | %d |\n", x.at.Round(time.Second), x.sent, x.done, float64(x.bytes)/(1<<20), x.dead, x.live, x.avs)
		}
		if s.failed != "" {
			fmt.Fprintf(&b, "\nNot every task ran within 3 minutes after the last send: %s.\n", s.failed)
		}
		b.WriteString("\nAt the end, by table:\n\n")
		for _, t := range s.tables {
			b.WriteString("- " + t + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

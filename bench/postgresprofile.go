package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Where a PostgreSQL subject's time goes: every statement its pool runs is
// counted and timed on the client (a pgx tracer on each subject's pool),
// and the Go process's CPU and the PostgreSQL server's (every process
// named postgres: server-wide, so another client's load lands in it) are
// read around each timed part. Subjects run one at a time, so the tracer
// and the process CPU are the subject's own.

// stmtTracer counts and times the statements of every pool pgOpen makes.
type stmtTracer struct {
	mu    sync.Mutex
	stats map[string]*stmtCost
}

type stmtCost struct {
	calls int
	dur   time.Duration
}

var pgTrace = &stmtTracer{stats: map[string]*stmtCost{}}

type traceKey struct{}

type traceStart struct {
	sql string
	at  time.Time
}

func (t *stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{d.SQL, time.Now()})
}

func (t *stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceKey{}).(traceStart); ok {
		t.add(s.sql, time.Since(s.at))
	}
}

func (t *stmtTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{"(batch)", time.Now()})
}

func (t *stmtTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.add("(in a batch) "+d.SQL, 0)
}

func (t *stmtTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if s, ok := ctx.Value(traceKey{}).(traceStart); ok {
		t.add(s.sql, time.Since(s.at))
	}
}

func (t *stmtTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{"COPY " + d.TableName.Sanitize(), time.Now()})
}

func (t *stmtTracer) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromEndData) {
	if s, ok := ctx.Value(traceKey{}).(traceStart); ok {
		t.add(s.sql, time.Since(s.at))
	}
}

func (t *stmtTracer) add(sql string, d time.Duration) {
	t.mu.Lock()
	c := t.stats[sql]
	if c == nil {
		c = &stmtCost{}
		t.stats[sql] = c
	}
	c.calls++
	c.dur += d
	t.mu.Unlock()
}

// take returns the statements counted since the last take and starts
// counting afresh.
func (t *stmtTracer) take() map[string]*stmtCost {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	t.stats = map[string]*stmtCost{}
	return s
}

// pgCPUs returns the CPU time (user + system, µs) of every process named
// postgres, by pid.
func pgCPUs() map[int]float64 {
	const tick = 100.0 // USER_HZ
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	out := map[int]float64{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[pid] = (u + st) / tick * 1e6
	}
	return out
}

// backendCPU sums, over the backends of the subject's pool (its
// application_name, the schema's name), the CPU each spent since before
// (a backend started since counts from zero).
func backendCPU(pool *pgxpool.Pool, schema string, before map[int]float64) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", schema)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	now := pgCPUs()
	var sum float64
	for _, pid := range pids {
		sum += now[int(pid)] - before[int(pid)]
	}
	return sum
}

// A pgCost is what one subject spent in one scenario, summed over rounds.
type pgCost struct {
	tasks        int
	elapsed      time.Duration
	goCPU, pgCPU float64 // µs
	stmts        map[string]*stmtCost
}

// pgMeter measures one timed part: begin before it, end after it.
type pgMeter struct {
	t0        time.Time
	cpu0      float64
	pg0       map[int]float64
	began     bool
	r         *report
	key, subj string
	tasks     int
	p         pgPeer
}

func (r *report) meter(key, subject string, tasks int, p pgPeer) *pgMeter {
	return &pgMeter{r: r, key: key, subj: subject, tasks: tasks, p: p}
}

func (m *pgMeter) begin() {
	pgTrace.take()
	m.cpu0, m.pg0 = processCPU(), pgCPUs()
	m.t0 = time.Now()
	m.began = true
}

// around adapts the meter to drainOn's hook.
func (m *pgMeter) around(end bool) {
	if end {
		m.end()
	} else {
		m.begin()
	}
}

func (m *pgMeter) end() {
	if !m.began {
		return
	}
	el := time.Since(m.t0)
	gc := processCPU() - m.cpu0
	st := pgTrace.take()
	pool, schema := m.p.db()
	pc := backendCPU(pool, schema, m.pg0)
	pgTrace.take()
	if m.r.pgCost == nil {
		m.r.pgCost = map[[2]string]*pgCost{}
	}
	k := [2]string{m.key, m.subj}
	c := m.r.pgCost[k]
	if c == nil {
		c = &pgCost{stmts: map[string]*stmtCost{}}
		m.r.pgCost[k] = c
	}
	c.tasks += m.tasks
	c.elapsed += el
	c.goCPU += gc
	c.pgCPU += pc
	for q, s := range st {
		q = normSQL(q)
		x := c.stmts[q]
		if x == nil {
			x = &stmtCost{}
			c.stmts[q] = x
		}
		x.calls += s.calls
		x.dur += s.dur
	}
}

var (
	spaceRE  = regexp.MustCompile(`\s+`)
	schemaRE = regexp.MustCompile(`"?bench_(raw|river|errand)_[a-z0-9]+"?`)
)

// normSQL writes a statement on one line, its schema as S, cut at 110
// characters.
func normSQL(q string) string {
	q = schemaRE.ReplaceAllString(strings.TrimSpace(spaceRE.ReplaceAllString(q, " ")), "S")
	if len(q) > 110 {
		q = q[:110] + "…"
	}
	return q
}

// pgCostMarkdown prints the per-task costs and each subject's statements.
func (r *report) pgCostMarkdown() string {
	if len(r.pgCost) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Where the time goes, same run (all rounds summed): the Go process's CPU (getrusage; the subject's own, subjects run one at a time), the PostgreSQL CPU of the subject's own connections (their backend processes' user + system time from /proc, found by the pool's application_name; the server's background processes, WAL writer and autovacuum among them, are not in it), and the statements the subject's pool ran (a pgx tracer: calls and client-side time, a round trip included; statements in flight at once overlap, so their times add up past the elapsed time).\n\n")
	b.WriteString("| scenario | subject | tasks/s | Go CPU µs/task | PostgreSQL backends' CPU µs/task | statements/task |\n|---|---|---|---|---|---|\n")
	keys := slices.Collect(func(yield func([2]string) bool) {
		for k := range r.pgCost {
			if !yield(k) {
				return
			}
		}
	})
	order := map[string]int{}
	for i, m := range pgMetrics() {
		order[m.key] = i
	}
	slices.SortFunc(keys, func(a, c [2]string) int {
		if d := order[a[0]] - order[c[0]]; d != 0 {
			return d
		}
		return strings.Compare(a[1], c[1])
	})
	for _, k := range keys {
		c := r.pgCost[k]
		t := float64(c.tasks)
		calls := 0
		for _, s := range c.stmts {
			calls += s.calls
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.1f | %.2f |\n", k[0], k[1], rate(c.tasks, c.elapsed), c.goCPU/t, c.pgCPU/t, float64(calls)/t)
	}
	b.WriteString("\nBy statement, the five that took the most client time (S is the subject's schema; under 0.01 calls/task left out):\n\n")
	b.WriteString("| scenario | subject | statement | calls/task | µs/call (client) |\n|---|---|---|---|---|\n")
	for _, k := range keys {
		c := r.pgCost[k]
		t := float64(c.tasks)
		qs := slices.Sorted(func(yield func(string) bool) {
			for q := range c.stmts {
				if !yield(q) {
					return
				}
			}
		})
		slices.SortStableFunc(qs, func(a, x string) int { return int(c.stmts[x].dur - c.stmts[a].dur) })
		shown := 0
		for _, q := range qs {
			s := c.stmts[q]
			if shown == 5 {
				break
			}
			if float64(s.calls)/t < 0.01 {
				continue
			}
			shown++
			fmt.Fprintf(&b, "| %s | %s | `%s` | %.2f | %.0f |\n", k[0], k[1], strings.ReplaceAll(q, "|", "\\|"), float64(s.calls)/t, float64(s.dur.Microseconds())/float64(s.calls))
		}
	}
	b.WriteString("\n")
	return b.String()
}

package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A profileRun is where one subject's time went in one scenario: Redis
// microseconds by command (and by script for EVALSHA), the Go process's
// CPU and allocations, each per task.
type profileRun struct {
	scenario, subject string
	tasks             int
	elapsed           time.Duration
	cmds              map[string]*cmdCost // by command or script, this subject's keys only (SLOWLOG)
	statsUsec         float64             // INFO commandstats, server-wide, less commands scripts ran
	nestedUsec        float64             // commands scripts ran (SLOWLOG, server-wide)
	redisCPU          float64             // INFO cpu, server-wide, µs
	goCPU             float64             // getrusage, this process, µs
	mallocs           uint64
}

type cmdCost struct {
	calls int
	usec  int64
}

// profile runs the 10-worker drain, the one-producer enqueue and the
// enqueue while 10 workers consume once per
// Redis subject, *profileN tasks each, with every command logged
// (slowlog-log-slower-than 0), and records where the time goes. It
// restores the slowlog settings it changed.
//
// INFO commandstats and INFO cpu are server-wide: another client's load on
// the same Redis during the run lands in them. The by-command rows count
// only commands naming one of the subject's keys.
func profile(r *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	saved, err := r.rdb.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return err
	}
	defer func() {
		for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
			if v, ok := saved[k]; ok {
				if err := r.rdb.ConfigSet(context.Background(), k, v).Err(); err != nil {
					fmt.Fprintf(os.Stderr, "bench: restoring %s %s: %v\n", k, v, err)
				}
			}
		}
		r.rdb.SlowLogReset(context.Background())
	}()
	if err := r.rdb.ConfigSet(ctx, "slowlog-max-len", "1000000").Err(); err != nil {
		return err
	}
	if err := r.rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		return err
	}
	total := *profileN
	if *quick {
		total = 1000
	}
	subjects := peerSubjects()
	if *subjectsFlag != "" {
		subjects = slices.DeleteFunc(subjects, func(s subject) bool { return !strings.Contains(*subjectsFlag, s.name) })
	}
	for _, sc := range []struct {
		name string
		run  func(ctx context.Context, p peer, around func(bool)) (time.Duration, error)
	}{
		{fmt.Sprintf("drain %s, 10 workers", kn(total)), func(ctx context.Context, p peer, around func(bool)) (time.Duration, error) {
			return drainOn(ctx, p, total, 10, around)
		}},
		{fmt.Sprintf("enqueue %s, 1 producer", kn(total)), func(ctx context.Context, p peer, around func(bool)) (time.Duration, error) {
			return enqueueOn(ctx, p, total, 1, around)
		}},
		{fmt.Sprintf("enqueue %s from 1 producer while 10 workers consume", kn(total)), func(ctx context.Context, p peer, around func(bool)) (time.Duration, error) {
			return mixedOn(ctx, p, total, around)
		}},
	} {
		for _, s := range subjects {
			fmt.Fprintf(os.Stderr, "bench: profile: %s: %s\n", sc.name, s.name)
			p, err := s.open(r)
			if err != nil {
				return err
			}
			pr := profileRun{scenario: sc.name, subject: s.name, tasks: total}
			var m0, m1 runtime.MemStats
			var cpu0, rcpu0 float64
			var t0 time.Time
			var aerr error
			around := func(end bool) {
				if !end {
					if aerr = r.rdb.SlowLogReset(ctx).Err(); aerr == nil {
						aerr = r.rdb.ConfigResetStat(ctx).Err()
					}
					rcpu0, _ = redisCPU(ctx, r.rdb)
					runtime.ReadMemStats(&m0)
					cpu0 = processCPU()
					t0 = time.Now()
					return
				}
				pr.elapsed = time.Since(t0)
				pr.goCPU = processCPU() - cpu0
				runtime.ReadMemStats(&m1)
				pr.mallocs = m1.Mallocs - m0.Mallocs
				rcpu1, err := redisCPU(ctx, r.rdb)
				if err != nil {
					aerr = err
				}
				pr.redisCPU = rcpu1 - rcpu0
				pr.statsUsec, err = commandstatsUsec(ctx, r.rdb)
				if err != nil {
					aerr = err
				}
				pr.cmds, pr.nestedUsec, err = slowlogCosts(ctx, r.rdb, p.token())
				if err != nil {
					aerr = err
				}
				// commandstats counts a script's time under EVALSHA and
				// again under each command it ran.
				pr.statsUsec -= pr.nestedUsec
			}
			_, err = sc.run(ctx, p, around)
			p.stop()
			if err == nil {
				err = aerr
			}
			if err != nil {
				return fmt.Errorf("%s, %s: %w", sc.name, s.name, err)
			}
			r.profile = append(r.profile, pr)
			if err := r.clean(); err != nil {
				return err
			}
		}
	}
	return nil
}

func processCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// redisCPU returns Redis's process CPU time (user + system) in µs.
func redisCPU(ctx context.Context, rdb *goredis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum * 1e6, nil
}

// commandstatsUsec sums usec over INFO commandstats.
func commandstatsUsec(ctx context.Context, rdb *goredis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		_, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
	}
	return sum, nil
}

var (
	uuidRE  = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	digitRE = regexp.MustCompile(`[0-9]+`)
)

// slowlogCosts reads the whole slowlog and sums, by command, the entries
// that name tok (the subject's keys); EVALSHA and EVAL are split by script,
// each named by the shapes of the keys it was given (the subject's token
// written P, UUIDs ID and numbers N) and its SHA's first characters.
// Redis 7 also logs each command a script runs (client "?:0"), inside the
// script's own time: those are listed as "in scripts: CMD" (names starting
// with nestedMark) and their server-wide sum is returned as nested.
func slowlogCosts(ctx context.Context, rdb *goredis.Client, tok string) (map[string]*cmdCost, float64, error) {
	logs, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return nil, 0, err
	}
	if len(logs) >= 1000000 {
		fmt.Fprintln(os.Stderr, "bench: profile: the slowlog overflowed (1 000 000 entries); lower -profilen")
	}
	out := map[string]*cmdCost{}
	var nested float64
	for _, e := range logs {
		inScript := e.ClientAddr == "?:0"
		if inScript {
			nested += float64(e.Duration.Microseconds())
		}
		if len(e.Args) == 0 || !slices.ContainsFunc(e.Args, func(a string) bool { return strings.Contains(a, tok) }) {
			continue
		}
		name := strings.ToUpper(e.Args[0])
		if inScript {
			name = nestedMark + name
		}
		if (name == "EVALSHA" || name == "EVAL" || name == "EVALSHA_RO") && len(e.Args) >= 3 {
			nk, _ := strconv.Atoi(e.Args[2])
			var shapes []string
			for _, k := range e.Args[3:min(len(e.Args), 3+nk)] {
				if strings.HasPrefix(k, "... (") {
					continue
				}
				k = strings.ReplaceAll(k, tok, "P")
				k = uuidRE.ReplaceAllString(k, "ID")
				k = digitRE.ReplaceAllString(k, "N")
				if !slices.Contains(shapes, k) {
					shapes = append(shapes, k)
				}
			}
			id := "script"
			if name != "EVAL" {
				id = e.Args[1][:min(7, len(e.Args[1]))]
			}
			name = fmt.Sprintf("%s %s (%s)", name, id, compactKeys(shapes))
		}
		c := out[name]
		if c == nil {
			c = &cmdCost{}
			out[name] = c
		}
		c.calls++
		c.usec += e.Duration.Microseconds()
	}
	return out, nested, nil
}

const nestedMark = "in scripts: "

func (r *report) profileMarkdown() string {
	if len(r.profile) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Where the time goes\n\n")
	b.WriteString("`go run ./bench -only profile`: each Redis subject once in a 10-worker drain, a one-producer enqueue and a one-producer enqueue while 10 workers consume (per task sent and run), ")
	b.WriteString("every command logged (SLOWLOG with slowlog-log-slower-than 0, restored afterwards). Per task: Redis µs in the subject's own commands ")
	b.WriteString("(SLOWLOG entries naming its keys), Redis µs in all commands (INFO commandstats after CONFIG RESETSTAT, less the commands scripts ran, which it also counts under EVALSHA) and Redis process CPU ")
	b.WriteString("(INFO cpu: adds reading, parsing and replying) — these two are server-wide, so another client's load lands in them —, ")
	b.WriteString("the Go process's CPU (getrusage over the scenario; the drain's preload is outside it) and its allocations (runtime.MemStats.Mallocs). ")
	b.WriteString("Logging every command slows Redis, so the elapsed times here are not the throughputs above.\n\n")
	b.WriteString("| scenario | subject | tasks/s (profiled) | Redis µs/task, own commands | Redis µs/task, commandstats | Redis CPU µs/task | Go CPU µs/task | allocs/task |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.profile {
		var own int64
		for k, c := range p.cmds {
			if !strings.HasPrefix(k, nestedMark) {
				own += c.usec
			}
		}
		t := float64(p.tasks)
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.0f |\n", p.scenario, p.subject, rate(p.tasks, p.elapsed),
			float64(own)/t, p.statsUsec/t, p.redisCPU/t, p.goCPU/t, float64(p.mallocs)/t)
	}
	b.WriteString("\nBy command (scripts by the keys they touch; P is the subject's prefix or queue, ID a UUID, N a number), the subject's own commands only. Rows \"in scripts: CMD\" are the commands the scripts ran, already inside the scripts' time (not added to the totals above):\n\n")
	b.WriteString("| scenario | subject | command or script | calls/task | µs/call | µs/task |\n|---|---|---|---|---|---|\n")
	for _, p := range r.profile {
		names := make([]string, 0, len(p.cmds))
		for k := range p.cmds {
			names = append(names, k)
		}
		slices.SortFunc(names, func(a, c string) int { return int(p.cmds[c].usec - p.cmds[a].usec) })
		t := float64(p.tasks)
		for _, k := range names {
			c := p.cmds[k]
			if float64(c.usec)/t < 0.05 && float64(c.calls)/t < 0.01 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %.1f | %.2f |\n", p.scenario, p.subject, strings.ReplaceAll(k, "|", "\\|"),
				float64(c.calls)/t, float64(c.usec)/float64(c.calls), float64(c.usec)/t)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// compactKeys writes keys sharing a prefix (up to a colon) once:
// "P:q:a P:q:b" is "P:q:{a b}".
func compactKeys(keys []string) string {
	if len(keys) < 2 {
		return strings.Join(keys, " ")
	}
	pre := keys[0]
	for _, k := range keys[1:] {
		for !strings.HasPrefix(k, pre) {
			pre = pre[:len(pre)-1]
		}
	}
	pre = pre[:strings.LastIndex(pre, ":")+1]
	if pre == "" {
		return strings.Join(keys, " ")
	}
	rest := make([]string, len(keys))
	for i, k := range keys {
		rest[i] = k[len(pre):]
	}
	return pre + "{" + strings.Join(rest, " ") + "}"
}

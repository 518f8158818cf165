package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

func scenarios() []scenario {
	return []scenario{
		{"peers", peers},
		{"profile", profile},
		{"enqueue, batch", enqueueBatch},
		{"delayed tasks", delayed},
		{"chord 10000", func(r *report) error { return chord(r, 10000) }},
		{"memory drain", memoryDrain},
		{"drain by result backend", backendDrains},
		{"SQS", sqsScenarios},
		{"AMQP", amqpScenarios},
	}
}

func rawKey() string { return "bench-raw-" + rand.Text()[:8] }

// rawLPush records the floor of the enqueue scenarios: n LPUSHes, one at a
// time.
func rawLPush(ctx context.Context, r *report, sc string) error {
	key := rawKey()
	defer r.rdb.Del(context.Background(), key)
	t0 := time.Now()
	for i := range *n {
		if err := r.rdb.LPush(ctx, key, strconv.Itoa(i)).Err(); err != nil {
			return err
		}
	}
	r.add(sc, "raw LPUSH", rate(*n, time.Since(t0)), "msgs/s")
	return nil
}

// checkQueued checks that the server's default queue holds want tasks: each
// task sent was queued once.
func checkQueued(ctx context.Context, srv *errand.Server, want int) error {
	q, err := srv.Queue(ctx, errand.DefaultQueue)
	if err != nil {
		return err
	}
	if q.Stats.Pending != want {
		return fmt.Errorf("%d tasks sent left %d on the queue, want each once", want, q.Stats.Pending)
	}
	return nil
}

func enqueueBatch(r *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	sc := fmt.Sprintf("enqueue %dk, batch", *n/1000)
	if err := rawLPush(ctx, r, sc); err != nil {
		return err
	}

	srv := redisServer(r.rdb)
	sigs := make([]*errand.Signature, *n)
	for i := range sigs {
		sigs[i] = errand.NewSignature("noop", i)
	}
	g, _ := errand.NewGroup(sigs...)
	t0 := time.Now()
	if _, err := srv.SendGroup(ctx, g, errand.SendConcurrency(4)); err != nil {
		return err
	}
	r.compare(sc, "errand SendGroup (batches of 100, 4 in flight)", rate(*n, time.Since(t0)), "tasks/s", "raw LPUSH", "≥ 5×")
	return checkQueued(ctx, srv, *n)
}

// latencyOn sends tasks at 200/s to idle workers of srv and records the time
// from send to handler start.
func latencyOn(r *report, subject string, srv *errand.Server) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	total := 2000
	if *quick {
		total = 400
	}
	var mu sync.Mutex
	var lat []time.Duration
	o := newOnce(total)
	srv.Register("stamp", func(id int, sent int64) error {
		d := time.Since(time.Unix(0, sent))
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		o.mark(id)
		return nil
	})
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
	wk.Start()
	defer wk.Shutdown(context.Background())
	tick := time.NewTicker(5 * time.Millisecond) // 200/s
	for i := range total {
		<-tick.C
		if _, err := srv.SendTask(ctx, errand.NewSignature("stamp", i, time.Now().UnixNano())); err != nil {
			return err
		}
	}
	tick.Stop()
	if err := o.wait(ctx); err != nil {
		return err
	}
	p50, p99, mx := percentiles(lat)
	sc := fmt.Sprintf("latency, %d tasks at 200/s to idle workers (send → handler start)", total)
	r.add(sc, subject+" p50", ms(p50), "ms")
	r.add(sc, subject+" p99", ms(p99), "ms")
	r.add(sc, subject+" max", ms(mx), "ms")
	if subject == "errand redis" {
		r.rows[len(r.rows)-3].target = "≤ 0.5 ms"
		r.rows[len(r.rows)-2].target = "≤ 2 ms"
	}
	return nil
}

func delayed(r *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	const total = 200
	srv := redisServer(r.rdb)
	var mu sync.Mutex
	var late []time.Duration
	early := 0
	o := newOnce(total)
	srv.Register("due", func(id int, eta int64) error {
		d := time.Since(time.Unix(0, eta))
		mu.Lock()
		if d < 0 {
			early++
		}
		late = append(late, d)
		mu.Unlock()
		o.mark(id)
		return nil
	})
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
	wk.Start()
	defer wk.Shutdown(context.Background())
	start := time.Now().Add(500 * time.Millisecond)
	for i := range total {
		eta := start.Add(time.Duration(i) * 5 * time.Second / total)
		sig := errand.NewSignature("due", i, eta.UnixNano())
		sig.ETA = &eta
		if _, err := srv.SendTask(ctx, sig); err != nil {
			return err
		}
	}
	if err := o.wait(ctx); err != nil {
		return err
	}
	p50, p99, mx := percentiles(late)
	const sc = "200 delayed tasks over 5 s (lateness after ETA)"
	r.add(sc, "errand redis p50", ms(p50), "ms")
	r.add(sc, "errand redis p99", ms(p99), "ms")
	r.rows[len(r.rows)-1].target = "≤ 10 ms"
	r.add(sc, "errand redis max", ms(mx), "ms")
	r.add(sc, "started early", float64(early), "tasks")
	r.rows[len(r.rows)-1].target = "0"
	return nil
}

func chord(r *report, size int) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	if *quick {
		size /= 10
	}
	sc := fmt.Sprintf("chord of %d (send → callback start), 10 workers", size)

	// Raw floor: members on a list, a DECR counter, the last one pushes the callback.
	q, cb, counter := rawKey(), rawKey(), rawKey()
	defer r.rdb.Del(context.Background(), q, cb, counter)
	o := newOnce(size)
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
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
		pipe.LPush(ctx, q, strconv.Itoa(i))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		stop()
		return err
	}
	if _, err := r.rdb.BRPop(ctx, time.Minute, cb).Result(); err != nil {
		stop()
		return fmt.Errorf("raw chord callback: %w", err)
	}
	rawD := time.Since(t0)
	stop()
	wg.Wait()
	if err := o.wait(ctx); err != nil {
		return err
	}
	const floor = "raw DECR-counter chord"
	r.add(sc, floor, ms(rawD), "ms")

	srv := redisServer(r.rdb)
	o = newOnce(size)
	fired := make(chan time.Time, 2)
	srv.Register("member", func(i int) (int, error) { o.mark(i); return i, nil })
	srv.Register("callback", func(xs ...int) error {
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
		sigs[i] = errand.NewSignature("member", i)
	}
	g, _ := errand.NewGroup(sigs...)
	c, _ := errand.NewChord(g, errand.NewSignature("callback"))
	t0 = time.Now()
	res, err := srv.SendChord(ctx, c, errand.SendConcurrency(4))
	if err != nil {
		return err
	}
	var at time.Time
	select {
	case at = <-fired:
	case <-ctx.Done():
		return fmt.Errorf("chord callback never ran")
	}
	if _, err := res.Get(ctx); err != nil {
		return err
	}
	if err := o.wait(ctx); err != nil {
		return err
	}
	if len(fired) != 0 {
		return fmt.Errorf("chord callback ran twice")
	}
	d := at.Sub(t0)
	r.rows = append(r.rows, row{sc, "errand redis", ms(d), "ms", floor, ms(rawD) / ms(d), "errand ≤ 2× floor time (ratio ≥ 0.5)"})
	return nil
}

func memoryDrain(r *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	const w = 10
	sc := fmt.Sprintf("memory broker drain %dk no-op, %d workers", *n/1000, w)
	// Floor: a plain Go channel worker pool.
	ch := make(chan int, *n)
	for i := range *n {
		ch <- i
	}
	close(ch)
	o := newOnce(*n)
	noop := func(int) error { return nil }
	t0 := time.Now()
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for i := range ch {
				noop(i)
				o.mark(i)
			}
		})
	}
	wg.Wait()
	if err := o.wait(ctx); err != nil {
		return err
	}
	const floor = "Go channel pool"
	r.add(sc, floor, rate(*n, time.Since(t0)), "tasks/s")

	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	d, err := errandDrain(ctx, srv, *n, w, nil)
	if err != nil {
		return err
	}
	r.compare(sc, "errand memory broker + backend, states recorded", rate(*n, d), "tasks/s", floor, "≥ 0.15×")
	return nil
}

// errandDrain preloads total no-op tasks on srv (one group send), then
// drains them with a worker of w slots and returns how long the drain took,
// checking every task succeeded exactly once. before runs just before the
// worker starts (to reset counters).
func errandDrain(ctx context.Context, srv *errand.Server, total, w int, before func()) (time.Duration, error) {
	o := newOnce(total)
	srv.Register("noop", func(int) error { return nil })
	sigs := make([]*errand.Signature, total)
	for i := range sigs {
		sigs[i] = errand.NewSignature("noop", i)
	}
	g, _ := errand.NewGroup(sigs...)
	if _, err := srv.SendGroup(ctx, g, errand.SendConcurrency(4)); err != nil {
		return 0, err
	}
	if before != nil {
		before()
	}
	mark := func(next errand.TaskHandler) errand.TaskHandler {
		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
			st, err := next(ctx, sig)
			if st != nil && st.State == errand.StateSuccess {
				o.mark(sig.UUID)
			}
			return st, err
		}
	}
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: w, Middleware: []errand.Middleware{mark}})
	t0 := time.Now()
	wk.Start()
	err := o.wait(ctx)
	d := time.Since(t0)
	wk.Shutdown(context.Background())
	return d, err
}

// analysis is appended to the report under the table.
const analysis = `
## How the peers are run

- **Same work.** Every subject's task carries five int64 arguments (an id,
  the send time in nanoseconds, 3, 4, 5) and runs a no-op handler that
  records the id (and, for latency, the time since the send). A task that
  runs twice or never fails the run. Drains preload the queue (not timed)
  and time from the workers' start to the last handler start; enqueue rows
  time the sends, then check the queue holds each task once.
- **asynq v0.26.0**: asynq.NewClient and asynq.NewServer on an
  asynq.RedisClientOpt (its own connections, as its docs set it up), one
  queue per run, every Config field at its default except Concurrency,
  Queues and a silent Logger; the payload is the five arguments as JSON (asynq
  takes bytes; its docs encode JSON). Its default TaskCheckInterval (1 s) is
  what makes its latency row hundreds of milliseconds: a processor that
  finds every queue empty sleeps that long before it looks again. That is
  the default asynq's users run, so the table keeps it; the extra line
  under the table gives the same scenario with a short interval
  (-asynqcheck), which asynq's docs warn costs Redis and CPU when idle.
  The same sleep is in its "while 10 workers consume" row: its workers
  start on an empty queue, so the first tasks wait up to 1 s (out of about
  2.5 s for 20 000 tasks); errand's and machinery's idle workers block on
  Redis instead.
- **machinery v2.0.16**: the go-redis broker and backend (NewGR, as
  machinery's go-redis example) and the eager lock; config defaults
  (results kept 3600 s, the broker's BLPOP wait 1 s, which blocks rather
  than polls, and its 500 ms delayed-task poll) except the queue and
  delayed-set names (per run) and NoUnixSignals (a worker per scenario
  must not install a signal handler each). One producer Server sends
  (SendTaskWithContext: the PENDING state, then RPUSH), as a service would;
  each worker run builds its own Server, whose broker connections machinery
  closes on Quit. machinery's Server starts a cron goroutine that nothing
  stops; it sits idle on a timer (the bench prints the goroutine count
  after the peers). Chords: members return only an error and the callback
  is immutable (machinery passes members' results as arguments, and a
  no-result member has none); errand's chord passes the 1000 results to the
  callback. machinery checks group completion by reading every member's
  state on each member's success, so its chord grows with the square of
  the size.
- **errand**: the Redis broker and the Redis backend on one Redis with
  default options, one prefix per run. **raw**: go-redis commands with
  nothing recorded: reliable BLMOVE + LREM drains, LPUSH sends, LPUSH to
  BLMOVE workers for latency, a DECR-counter chord.
- Every run deletes its keys (asynq's under asynq:{queue}, and its queue
  from asynq:queues); workers and clients are stopped before the next run.

## Reading the numbers

On this 2-core machine Redis, memcached, FerretDB, fauxqs, RabbitMQ, the
workers and the producer share the cores, and repeated runs vary (the
ranges in brackets): compare ratios within one report, not across
reports. The peer table's ratios are same-run ratios of medians over
interleaved rounds, so a loaded machine biases every subject alike.

### The per-task path (issue 23)

What changed, each step measured before and after in docs/redis.md
("Broker and backend on one Redis: one round trip in, one out" and its
"Measured" section, rounds 1 to 3):

- **One round trip in** (driver.StartCarrier): on one Redis node shared by
  the Redis broker and backend, the fetch script begins the attempts it
  leases (driver.Starter's table, in Lua) and the handler runs with no
  Start call. Script calls per task in the 10-worker drain: 2.17 → 0.83.
- **One round trip out** (driver.SettleCarrier): a quiet success's
  SUCCESS, its ack and its completed-list entry go in one script, joined
  across slots as acks are.
- **Leaner Lua**: the fetch and ack scripts do one command per key per
  batch; Redis commands per task 22.7 → 14 (10 workers), 19.9 → 6 (50).
- **Leaner Go**: one lease extender per worker instead of a goroutine per
  task, the signature and its arguments decoded without reflection for
  errand's own encoding, no timer context after a quiet success.
  Allocations per task in the drain: 289 → 136 (profile above); Go CPU
  per task 124 → 72 µs, now below asynq's 88.

Against the run before this work (the same harness, 3 interleaved rounds
each, on a machine about as loaded): errand ÷ asynq went 0.55× → 0.61×
(drain, 10 workers), 0.53× → 1.03× (drain, 50 workers), 0.39× → 0.60×
(enqueue, 1 producer), 0.48× → 0.57× (10 producers); the chord of 1000
312 → 216 ms. errand drains faster than machinery at 10 and 50 workers
(1.37×, 1.66×) and runs a chord of 1000 21× faster than machinery.

### Targets still missed, and where the difference goes

The side-by-side profile above ("Where the time goes", the same run)
answers it:

- **Drain (target ≥ 1.5× asynq).** Per task errand now spends less Go CPU
  than asynq (72 against 88 µs) but twice its Redis time in its own
  commands (79 against 42 µs). The commands inside errand's scripts add
  up to about 14 µs a task (the "in scripts" rows); the rest, about 65 µs,
  is the Lua interpreter: in this profile a fetch call took about 180 µs
  for about 5 messages and an ack-and-settle call about 66 µs (logging
  every command inflates both; on a Redis of its own an empty fetch costs
  16–28 µs and a one-message fetch about 40 µs), spent on about 2 µs of
  overhead per redis.call, defining the shared snippets' functions on
  every call, and per message building the state's JSON and RFC 3339
  times in Lua and reading the previous state with patterns. asynq's two scripts do plain commands on one hash and
  two lists. On 2 cores Redis's ~100 µs of CPU per task is the bound.
  What would close it: load the scripts once as a Redis Functions library
  (FUNCTION LOAD, Redis 7) instead of EVALSHA of long scripts, pass the
  states' JSON built in Go instead of building it in Lua, and keep lease
  token and delivery count in one field. Not done in this issue's time.
- **Enqueue (targets ≥ 1.2× asynq from 1 producer, ≥ 1.0× from 10).** A
  send on one node is one MULTI/EXEC of plain commands (no Lua) and its
  signature and PENDING state are written without reflection
  (docs/redis.md, "Round 6"): about 13–17 µs of Redis per send against
  asynq's one script, 20 µs of Redis CPU against 15, 28 µs of Go CPU and
  63 allocations against 18 and 26. What is left is errand's extra writes
  (the PENDING state, the task-ID index, the wake-up token, the unlisted
  mark: MULTI, SET, 2 HSET, RPUSH, LPUSH, DEL, EXEC), each a command that
  Redis parses and answers QUEUED and go-redis builds, encodes and reads
  back, against asynq's three commands inside one script.
- **Enqueue while consuming (no target).** Each send wakes an idle worker
  that runs a whole fetch script for one message, so the fetch's per-call
  cost (above) is paid per task: 255 µs of Redis per task against asynq's
  47 (asynq's idle workers sleep up to a second instead of waking).
- **Latency p50 (target ≤ machinery's and ≤ 0.5 ms; p99 ≤ 2 ms met).**
  An idle worker's wake-up carries the fetch: its BLPOP and the fetch
  script go in one pipeline, so the message comes back in the wake-up's
  round trip (docs/redis.md, "Round 7"). What is left on the path is
  work, not waiting: the producer's Go before its pipeline leaves (about
  55 µs), the publish script and the fetch script with the start (Redis
  runs both before it answers either client), and about 60 µs of Go from
  the fetch's reply to the function (the start's previous state decoded
  by encoding/json, json.Valid before the signature's fast decode, the
  lease, the task's context). machinery's p50 moves between 0.4 and
  0.6 ms with the machine's load, and errand's with it.
- **Chord of 1 000 (target ≤ 2× the raw DECR chord).** Each member pays
  the per-task path above plus the group-completion script; the raw chord
  pays one BRPOP and one DECR. The same savings apply.

Every drain, latency, delay and chord scenario ran every task exactly
once; every enqueue scenario checked that the queue then held each task
once.

### Other rows

- **AMQP drain (target ≥ 0.7× the raw consume + ack).** A worker slot
  waits for the task's Redis states (the carriers are Redis-only) and a
  confirmed ack before RabbitMQ, with prefetch equal to the free slots,
  sends the next message; the floor acks at once and records nothing.
  The process used about a fifth of a core: the limit is waiting, not
  CPU (docs/amqp.md, "Performance").
- **SQS and memory drains, batch enqueue**: unchanged by this work; the
  generic path (other backends, SQS) keeps its numbers within the noise.

Reproduce (flags: -quick for small sizes, -n tasks, -only NAME of a
scenario group (peers, profile, ...), -rounds, -latn, -subjects
raw,errand,asynq,machinery, -peer drain10|drain50|enq1|enq10|mixed|latency|chord,
-asynqcheck, -profilen, -cpuprofile FILE):

    scripts/services start && . .services/env && go run ./bench -out docs/benchmarks.md
`

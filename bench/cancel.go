package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	redisbackend "github.com/errand-go/errand/backends/redis"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
)

// The task-control rows (issue 34; go run ./bench -only cancel):
//
//   - cancel → running handler: a task is sent, its handler starts (in a
//     second Server, on clients of its own, as a worker process would
//     be), the producer's Server.Cancel cancels it, and the handler
//     stamps the moment its ctx is done, checking that
//     context.Cause(ctx) is errand.ErrCancelled. Measured from the call
//     and from its return, over -canceln cancels per subject. Redis and
//     PostgreSQL deliver a notice (ExtendEvery at its default, 10 s, so
//     nothing else could); SQS with the Redis backend has no notices and
//     learns of the cancel at the lease extension (ExtendEvery 1 s, the
//     cancel at a random moment of it).
//   - cancels of queued tasks: Server.Cancel's rate on tasks not started,
//     from one caller and from ten; then a worker takes the cancelled
//     messages, which must never run.
//   - the concurrency cap's overhead: a 10-worker Redis drain with
//     WithConcurrencyLimit(10) (a cap that never refuses: it measures
//     taking, renewing and freeing the slots) against one without.

var cancelN = flag.Int("canceln", 200, "running tasks cancelled per subject in the cancel scenario (-only cancel)")

// tcExtendEvery is the ExtendEvery of the subject without notices (its
// Lease three times that, the default ratio).
const tcExtendEvery = time.Second

// tcBound is how long any one step may take before the run fails: a
// guard against a hang, not a measure.
const tcBound = 30 * time.Second

// A tcSubject is a broker and backend pair: open returns a producer's and
// a worker's Server on the same queues and states, each on clients of its
// own.
type tcSubject struct {
	name    string
	notices bool
	lanes   int           // cancels in flight at once
	every   time.Duration // WorkerConfig.ExtendEvery; 0: the default
	queue   string
	open    func(ctx context.Context) (prod, work *errand.Server, stop func(), err error)
}

// tcLatency is one subject's cancels of running tasks.
type tcLatency struct {
	subject  string
	notices  bool
	every    time.Duration
	lanes    int
	fromCall []time.Duration
	fromRet  []time.Duration
	before   int // handlers that saw the cancel before Cancel returned
}

// tcQueued is one subject's cancels of queued tasks.
type tcQueued struct {
	subject          string
	tasks            int     // per caller mode
	one, ten         float64 // cancels/s from 1 caller, from 10
	discard          float64 // cancelled messages taken and acked by a worker, per second
	discardFor       time.Duration
	sendOne, sendTen float64 // for scale: SendTask/s of the same tasks (10 producers)
}

// tcRuns is the scenario's results, for its section of the report.
type tcRuns struct {
	load     []string
	lat      []tcLatency
	queued   []tcQueued
	capTasks int
	drains   [tcDrains][]float64 // tasks/s by round, by drain
}

func cancelScenarios(r *report) error {
	r.tc = &tcRuns{}
	r.tc.load = append(r.tc.load, "at the start: "+tcLoad())
	defer func() { r.tc.load = append(r.tc.load, "at the end: "+tcLoad()) }()
	total := *cancelN
	queued := 1000
	if *quick {
		total = min(total, 50)
		queued = 200
	}
	for _, s := range tcSubjects(r) {
		fmt.Fprintf(os.Stderr, "bench: cancel: %s\n", s.name)
		if err := tcRun(r, s, total, queued); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	fmt.Fprintf(os.Stderr, "bench: cancel: concurrency cap\n")
	return tcCap(r)
}

func tcSubjects(r *report) []tcSubject {
	ss := []tcSubject{{name: "Redis broker + Redis backend (co-located)", notices: true, lanes: 1, queue: errand.DefaultQueue,
		open: func(ctx context.Context) (*errand.Server, *errand.Server, func(), error) {
			p := token("cancel")
			rdb2, err := tcRedisClient()
			if err != nil {
				return nil, nil, nil, err
			}
			prod, work := tcRedisServer(r.rdb, p), tcRedisServer(rdb2, p)
			return prod, work, func() { work.Close(); prod.Close(); rdb2.Close() }, nil
		}}}
	if os.Getenv("ERRAND_POSTGRES_URL") != "" {
		ss = append(ss, tcSubject{name: "PostgreSQL broker + PostgreSQL backend (co-located)", notices: true, lanes: 1, queue: errand.DefaultQueue, open: tcPostgres})
	} else {
		fmt.Fprintln(os.Stderr, "bench: cancel: ERRAND_POSTGRES_URL is not set; skipping PostgreSQL")
	}
	if os.Getenv("ERRAND_SQS_ENDPOINT") != "" {
		ss = append(ss, tcSubject{name: "SQS broker (fauxqs) + Redis backend", lanes: 20, every: tcExtendEvery, queue: "q",
			open: func(ctx context.Context) (*errand.Server, *errand.Server, func(), error) {
				p := token("cancel")
				rdb2, err := tcRedisClient()
				if err != nil {
					return nil, nil, nil, err
				}
				c1, c2 := sqsClient(), sqsClient()
				prod, work := tcSQSServer(c1, r.rdb, p), tcSQSServer(c2, rdb2, p)
				return prod, work, func() {
					work.Close()
					prod.Close()
					rdb2.Close()
					tcDeleteQueue(c1, p+"-q")
				}, nil
			}})
	} else {
		fmt.Fprintln(os.Stderr, "bench: cancel: ERRAND_SQS_ENDPOINT is not set; skipping SQS")
	}
	return ss
}

// tcRedisClient is a second client on ERRAND_REDIS_URL, as another
// process would have.
func tcRedisClient() (*goredis.Client, error) {
	o, err := goredis.ParseURL(os.Getenv("ERRAND_REDIS_URL"))
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(o), nil
}

func tcRedisServer(rdb *goredis.Client, prefix string) *errand.Server {
	srv, _ := errand.NewServer(errand.Config{
		Broker:  redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix}),
		Backend: redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix, ResultExpiry: 10 * time.Minute}),
	})
	return srv
}

func tcSQSServer(c *awssqs.Client, rdb *goredis.Client, prefix string) *errand.Server {
	srv, _ := errand.NewServer(errand.Config{
		Broker:       sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix + "-"}),
		Backend:      redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix, ResultExpiry: 10 * time.Minute}),
		DefaultQueue: "q",
	})
	return srv
}

// tcDeleteQueue deletes the SQS queue the subject made.
func tcDeleteQueue(c *awssqs.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err == nil {
		_, err = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: cancel: deleting SQS queue %s: %v\n", name, err)
	}
}

// tcPostgres opens errand's PostgreSQL broker and backend on a fresh
// schema twice: the producer on the pool that made the schema, the
// worker on a second pool.
func tcPostgres(ctx context.Context) (*errand.Server, *errand.Server, func(), error) {
	pool, schema, err := pgOpen(ctx, "errand-cancel")
	if err != nil {
		return nil, nil, nil, err
	}
	if err := postgresbroker.Migrate(ctx, pool, schema); err != nil {
		pgClose(pool, schema)
		return nil, nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv("ERRAND_POSTGRES_URL"))
	if err != nil {
		pgClose(pool, schema)
		return nil, nil, nil, err
	}
	cfg.MaxConns = pgMaxConns // as pgOpen's
	cfg.ConnConfig.RuntimeParams["application_name"] = schema + "_worker"
	pool2, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		pgClose(pool, schema)
		return nil, nil, nil, err
	}
	var srvs []*errand.Server
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
		pool2.Close()
		pgClose(pool, schema)
	}
	for _, p := range []*pgxpool.Pool{pool, pool2} {
		brk, err := postgresbroker.New(ctx, p, &postgresbroker.Options{Schema: schema})
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		bk, err := postgresbackend.New(ctx, p, &postgresbackend.Options{Schema: schema, ResultExpiry: 10 * time.Minute})
		if err != nil {
			brk.Close()
			stop()
			return nil, nil, nil, err
		}
		srv, err := errand.NewServer(errand.Config{Broker: brk, Backend: bk})
		if err != nil {
			brk.Close()
			bk.Close()
			stop()
			return nil, nil, nil, err
		}
		srvs = append(srvs, srv)
	}
	return srvs[0], srvs[1], stop, nil
}

// A tcHold is one running task the producer cancels: its handler closes
// started, waits for its ctx and sends what it saw on seen.
type tcHold struct {
	runs    atomic.Int64
	started chan struct{}
	seen    chan tcSeen
}

type tcSeen struct {
	at    time.Time
	cause error
}

// tcHolds are the tasks a run expects to start, by the id they carry.
// Any other task that runs is counted as stray: a cancelled queued task
// must never start.
type tcHolds struct {
	m     sync.Map
	stray atomic.Int64
	dup   atomic.Int64
}

func (h *tcHolds) run(ctx context.Context, id string) error {
	v, ok := h.m.Load(id)
	if !ok {
		h.stray.Add(1)
		return nil
	}
	hd := v.(*tcHold)
	if hd.runs.Add(1) > 1 {
		h.dup.Add(1)
		return nil
	}
	close(hd.started)
	<-ctx.Done()
	hd.seen <- tcSeen{time.Now(), context.Cause(ctx)}
	return ctx.Err()
}

// wait returns what ch carries, or an error after tcBound.
func wait[T any](ctx context.Context, ch <-chan T, what string) (T, error) {
	t := time.NewTimer(tcBound)
	defer t.Stop()
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return zero, fmt.Errorf("%s: not within %v", what, tcBound)
	case <-ctx.Done():
		return zero, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

func tcRun(r *report, s tcSubject, total, queued int) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	prod, work, stop, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer stop()
	h := &tcHolds{}
	if err := work.Register("hold", h.run); err != nil {
		return err
	}
	lat, err := tcCancelRunning(ctx, s, prod, work, h, total)
	if err != nil {
		return err
	}
	r.tc.lat = append(r.tc.lat, lat)
	q, err := tcCancelQueued(ctx, s, prod, work, h, queued)
	if err != nil {
		return err
	}
	r.tc.queued = append(r.tc.queued, q)
	return nil
}

// tcCancelRunning cancels total running tasks, s.lanes at a time, and
// times each from Server.Cancel to its handler's ctx.Done.
func tcCancelRunning(ctx context.Context, s tcSubject, prod, work *errand.Server, h *tcHolds, total int) (tcLatency, error) {
	lat := tcLatency{subject: s.name, notices: s.notices, every: s.every, lanes: s.lanes}
	cfg := errand.WorkerConfig{Concurrency: max(10, s.lanes)}
	if s.every > 0 {
		cfg.Lease, cfg.ExtendEvery = 3*s.every, s.every
	}
	lat.every = cfg.ExtendEvery
	if lat.every == 0 {
		lat.every = 10 * time.Second // Lease 30 s ÷ 3, the defaults (worker.go)
	}
	wk := work.NewWorker(cfg)
	wk.Start()
	defer wk.Shutdown(context.Background())
	var mu sync.Mutex
	results := make([]*errand.AsyncResult, total)
	err := concurrentlyN(total, s.lanes, func(i int) error {
		id := fmt.Sprintf("running-%d", i)
		hd := &tcHold{started: make(chan struct{}), seen: make(chan tcSeen, 1)}
		h.m.Store(id, hd)
		res, err := prod.SendTask(ctx, errand.NewSignature("hold", id))
		if err != nil {
			return err
		}
		results[i] = res
		if _, err := wait(ctx, hd.started, "task "+id+" to start"); err != nil {
			return err
		}
		if s.every > 0 {
			// Without notices the cancel is read at the next lease
			// extension: cancel at a random moment of its cycle (pacing,
			// not waiting for an event).
			time.Sleep(rand.N(s.every))
		}
		t0 := time.Now()
		rep, err := prod.Cancel(ctx, res.Signature.UUID)
		t1 := time.Now()
		if err != nil {
			return err
		}
		if rep.Outcome != errand.CancelRunning {
			return fmt.Errorf("cancel of running task %s: outcome %q, want %q", id, rep.Outcome, errand.CancelRunning)
		}
		seen, err := wait(ctx, hd.seen, "task "+id+"'s handler to see its cancel")
		if err != nil {
			return err
		}
		if !errors.Is(seen.cause, errand.ErrCancelled) {
			return fmt.Errorf("task %s: its ctx ended with cause %v, want errand.ErrCancelled", id, seen.cause)
		}
		mu.Lock()
		lat.fromCall = append(lat.fromCall, seen.at.Sub(t0))
		lat.fromRet = append(lat.fromRet, seen.at.Sub(t1))
		if seen.at.Before(t1) {
			lat.before++
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return lat, err
	}
	if err := wk.Shutdown(ctx); err != nil {
		return lat, err
	}
	// Each stays CANCELLED: its handler's late return was discarded.
	for _, res := range results {
		st, err := res.State(ctx)
		if err != nil {
			return lat, err
		}
		if st.State != errand.StateCancelled {
			return lat, fmt.Errorf("task %s: state %s after its cancel, want CANCELLED", res.Signature.UUID, st.State)
		}
	}
	if d := h.dup.Load(); d > 0 {
		return lat, fmt.Errorf("%d cancelled tasks ran twice", d)
	}
	return lat, nil
}

// tcCancelQueued sends 2×tasks tasks with no worker running, cancels
// half from one caller and half from ten, then starts a worker and times
// it taking every cancelled message (none may run).
func tcCancelQueued(ctx context.Context, s tcSubject, prod, work *errand.Server, h *tcHolds, tasks int) (tcQueued, error) {
	q := tcQueued{subject: s.name, tasks: tasks}
	results := make([]*errand.AsyncResult, 2*tasks)
	send := func(from int) func(i int) error {
		return func(i int) error {
			res, err := prod.SendTask(ctx, errand.NewSignature("hold", fmt.Sprintf("queued-%d", from+i)))
			results[from+i] = res
			return err
		}
	}
	t0 := time.Now()
	if err := concurrentlyN(tasks, producers, send(0)); err != nil {
		return q, err
	}
	q.sendTen = rate(tasks, time.Since(t0))
	t0 = time.Now()
	if err := concurrentlyN(tasks, 1, send(tasks)); err != nil {
		return q, err
	}
	q.sendOne = rate(tasks, time.Since(t0))
	cancelOne := func(from int) func(i int) error {
		return func(i int) error {
			res := results[from+i]
			rep, err := prod.Cancel(ctx, res.Signature.UUID)
			if err != nil {
				return err
			}
			if rep.Outcome != errand.CancelQueued {
				return fmt.Errorf("cancel of queued task %s: outcome %q, want %q", res.Signature.UUID, rep.Outcome, errand.CancelQueued)
			}
			return nil
		}
	}
	t0 = time.Now()
	if err := concurrentlyN(tasks, 1, cancelOne(0)); err != nil {
		return q, err
	}
	q.one = rate(tasks, time.Since(t0))
	t0 = time.Now()
	if err := concurrentlyN(tasks, producers, cancelOne(tasks)); err != nil {
		return q, err
	}
	q.ten = rate(tasks, time.Since(t0))

	wk := work.NewWorker(errand.WorkerConfig{Concurrency: 10})
	t0 = time.Now()
	wk.Start()
	defer wk.Shutdown(context.Background())
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := work.Queue(ctx, s.queue)
		if err != nil {
			return q, err
		}
		st := info.Stats
		if st.Pending+st.Delayed+st.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			return q, fmt.Errorf("%d cancelled tasks still queued (%d pending, %d delayed, %d in flight) 2 minutes after a worker started", st.Pending+st.Delayed+st.InFlight, st.Pending, st.Delayed, st.InFlight)
		}
		<-tick.C
	}
	q.discardFor = time.Since(t0)
	q.discard = rate(2*tasks, q.discardFor)
	if err := wk.Shutdown(ctx); err != nil {
		return q, err
	}
	if n := h.stray.Load(); n > 0 {
		return q, fmt.Errorf("%d cancelled queued tasks ran", n)
	}
	return q, nil
}

// The drains of the concurrency cap's row.
const (
	tcUncapped = iota // the Redis pair, co-located (FetchStart, Settle)
	tcPlain           // the same, not co-located: fetch, then Start
	tcCapped          // co-located, the task WithConcurrencyLimit(10)
	tcDrains
)

// tcCap drains min(-n, 5000) no-op tasks on Redis with 10 workers, with
// WithConcurrencyLimit(10), without, and without on the pair not
// co-located, -rounds interleaved rounds. A task with a limit takes no
// co-located start (it must take its slot before STARTED is recorded:
// colocation.go), so the third drain parts the cost of the slots from
// that of the path they make the task take.
func tcCap(r *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	total := min(*n, 5000)
	r.tc.capTasks = total
	for round := range *rounds {
		order := []int{tcUncapped, tcPlain, tcCapped}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			d, err := tcCapDrain(ctx, r, total, v)
			if err != nil {
				return fmt.Errorf("concurrency cap (drain %d): %w", v, err)
			}
			r.tc.drains[v] = append(r.tc.drains[v], rate(total, d))
		}
	}
	return nil
}

// notColocated hides the Redis backend's location, so that the broker
// does not co-locate with it: every other capability stays.
type notColocated struct{ *redisbackend.Backend }

func (notColocated) Location() any { return nil }

func tcCapDrain(ctx context.Context, r *report, total, variant int) (time.Duration, error) {
	p := token("cap")
	var be errand.Backend = redisbackend.New(r.rdb, &redisbackend.Options{Prefix: p, ResultExpiry: 10 * time.Minute})
	if variant == tcPlain {
		be = notColocated{be.(*redisbackend.Backend)}
	}
	srv, err := errand.NewServer(errand.Config{Broker: redisbroker.New(r.rdb, &redisbroker.Options{Prefix: p}), Backend: be})
	if err != nil {
		return 0, err
	}
	defer srv.Close()
	o := newOnce(total)
	var opts []errand.TaskOption
	if variant == tcCapped {
		opts = append(opts, errand.WithConcurrencyLimit(10))
	}
	if err := srv.Register("noop", func(i int) error { o.mark(i); return nil }, opts...); err != nil {
		return 0, err
	}
	if err := sendNoops(ctx, srv, total); err != nil {
		return 0, err
	}
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
	t0 := time.Now()
	wk.Start()
	err = o.wait(ctx)
	d := time.Since(t0)
	wk.Shutdown(context.Background())
	return d, err
}

// tcLoad is the machine's load now (and PostgreSQL's other clients, where
// it is set).
func tcLoad() string {
	if os.Getenv("ERRAND_POSTGRES_URL") != "" {
		return pgLoad()
	}
	la, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(la))
	return fmt.Sprintf("load average %s (1, 5, 15 min)", strings.Join(f[:min(3, len(f))], " "))
}

// quantile is the q-quantile of ds (sorted in place), nearest rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func (r *report) tcMarkdown() string {
	t := r.tc
	if t == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Task control (issue 34)\n\n")
	fmt.Fprintf(&b, "`go run ./bench -only cancel` (flags of this run: %q). ", strings.Join(os.Args[1:], " "))
	b.WriteString("Each subject is a producer's `Server` and a worker's `Server` on the same queues and states, each on clients (a go-redis client, a pgx pool, an SQS client) of its own, as two processes would be. ")
	b.WriteString("**Cancel → running handler**: a task is sent, its handler starts and waits for its ctx; the producer calls `Server.Cancel` (outcome checked: running); the handler stamps the moment its ctx is done and checks that `context.Cause(ctx)` satisfies `errors.Is(…, errand.ErrCancelled)`. The time is taken from the call and from its return (negative where the handler saw the cancel before `Cancel` returned: the notice is sent inside it). Afterwards each task's state is checked to be CANCELLED (its handler's late return discarded). ")
	b.WriteString("Redis and PostgreSQL send cancel notices (PUBLISH; NOTIFY); their workers run at the default `ExtendEvery` (10 s), so only the notice can deliver the cancel within these times; one cancel at a time, sent as soon as the handler started. SQS has no notices: the worker reads the task's state at each lease extension, here `ExtendEvery` 1 s (`Lease` 3 s), and each cancel comes at a random moment (uniform in [0, `ExtendEvery`)) after its handler started, 20 tasks in flight at once. The promise checked is the issue's: within 1 s with notices, within `ExtendEvery` (plus one state read) without.\n\n")
	b.WriteString("The machine during the run:\n\n")
	for _, l := range t.load {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString("\n| subject | notices | cancels | ExtendEvery | from the call p50 | p95 | p99 | max | from the return p50 | p95 | p99 | max | seen before Cancel returned |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range t.lat {
		no := "no"
		if l.notices {
			no = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%d at once) | %v | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |\n", l.subject, no, len(l.fromCall), l.lanes, l.every,
			tcMS(quantile(l.fromCall, 0.50)), tcMS(quantile(l.fromCall, 0.95)), tcMS(quantile(l.fromCall, 0.99)), tcMS(quantile(l.fromCall, 1)),
			tcMS(quantile(l.fromRet, 0.50)), tcMS(quantile(l.fromRet, 0.95)), tcMS(quantile(l.fromRet, 0.99)), tcMS(quantile(l.fromRet, 1)),
			l.before, len(l.fromCall))
	}
	b.WriteString("\n**Cancels of queued tasks**: with no worker running, the producer sends the tasks (SendTask: from 10 producers, then from 1, for scale) and cancels them one `Server.Cancel` per task (outcome checked: queued), half from one caller, half from ten at once; then a worker of 10 slots starts and takes every cancelled message (it reads CANCELLED, runs nothing and acks), timed until the queue's stats show none pending, delayed or in flight; a cancelled task that ran fails the run.\n\n")
	b.WriteString("| subject | tasks per caller mode | Cancel, 1 caller | Cancel, 10 callers | SendTask, 1 producer | SendTask, 10 producers | worker discards the cancelled messages |\n|---|---|---|---|---|---|---|\n")
	for _, q := range t.queued {
		fmt.Fprintf(&b, "| %s | %d | %s cancels/s | %s cancels/s | %s tasks/s | %s tasks/s | %s msgs/s (%d in %v) |\n", q.subject, q.tasks,
			short(q.one, ""), short(q.ten, ""), short(q.sendOne, ""), short(q.sendTen, ""), short(q.discard, ""), 2*q.tasks, q.discardFor.Round(time.Millisecond))
	}
	if d := t.drains; len(d[tcCapped]) > 0 {
		fmt.Fprintf(&b, "\n**Concurrency cap overhead**: a drain of %d no-op tasks (one SendGroup, then a worker of 10 slots started; timed to the last handler start; every task checked to run once) on the Redis broker and backend, each on a fresh prefix, with the task registered `WithConcurrencyLimit(10)` and without, and without on the same pair not co-located (the backend's location hidden from the broker, every other capability kept): %d interleaved rounds (the order reversed every other round), medians with the range in brackets. A cap of 10 over 10 slots never refuses a task: what it costs is taking and freeing a slot (one `Acquire`, one `Free` per task; a renewal only at a lease extension) and, since a task with a limit must hold its slot before STARTED is recorded, the co-located fetch does not start it (`startableTasks`): it is started by a `Start` call of its own, as on a pair not co-located.\n\n", t.capTasks, len(d[tcCapped]))
		b.WriteString("| scenario | without a cap | WithConcurrencyLimit(10) | capped ÷ uncapped | without a cap, not co-located | capped ÷ not co-located |\n|---|---|---|---|---|---|\n")
		fmt.Fprintf(&b, "| drain %s no-op, Redis, 10 workers | %s | %s | %s | %s | %s |\n", kn(t.capTasks), cell(d[tcUncapped], "tasks/s"), cell(d[tcCapped], "tasks/s"), ratioCell(d[tcCapped], d[tcUncapped]),
			cell(d[tcPlain], "tasks/s"), ratioCell(d[tcCapped], d[tcPlain]))
	}
	b.WriteString("\n")
	return b.String()
}

// tcMS prints d in milliseconds.
func tcMS(d time.Duration) string { return num(ms(d)) + " ms" }

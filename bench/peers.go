package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/RichardKnop/machinery/v2"
	mbackendiface "github.com/RichardKnop/machinery/v2/backends/iface"
	mredisbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	mredisbroker "github.com/RichardKnop/machinery/v2/brokers/redis"
	mconfig "github.com/RichardKnop/machinery/v2/config"
	eagerlock "github.com/RichardKnop/machinery/v2/locks/eager"
	mlog "github.com/RichardKnop/machinery/v2/log"
	mtasks "github.com/RichardKnop/machinery/v2/tasks"
	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// A peer is one subject of the peer scenarios (raw go-redis, errand, asynq,
// machinery) on one fresh queue of its own. Every task carries the same
// payload, five int64 arguments (id, send time in ns, 3, 4, 5), and runs the
// same no-op handler, which reports the id and the send time.
type peer interface {
	// send enqueues one task from the caller's goroutine.
	send(ctx context.Context, id, sent int64) error
	// preload enqueues count tasks (ids 0..count-1) as fast as the subject
	// allows; not timed.
	preload(ctx context.Context, count int) error
	// start runs w workers calling run at each handler start.
	start(w int, run func(id, sent int64)) error
	// pending counts the tasks waiting on the queue.
	pending(ctx context.Context) (int, error)
	// token is a string every Redis key of this peer contains.
	token() string
	// stop stops the workers (if started) and every goroutine and client of
	// the peer.
	stop()
}

type subject struct {
	name string
	open func(r *report) (peer, error)
}

func peerSubjects() []subject {
	return []subject{
		{"raw", func(r *report) (peer, error) { return newRawPeer(r.rdb), nil }},
		{"errand", func(r *report) (peer, error) { return newErrandPeer(r.rdb), nil }},
		{"asynq", func(r *report) (peer, error) { return newAsynqPeer(r, 0) }},
		{"machinery", func(r *report) (peer, error) { return newMachineryPeer(r) }},
	}
}

func five(id, sent int64) [5]int64 { return [5]int64{id, sent, 3, 4, 5} }

func token(kind string) string { return "bench-" + kind + "-" + rand.Text()[:8] }

// raw: a JSON array on a list, LPUSH in, BLMOVE to a processing list and
// LREM out (reliable: a crashed worker's task stays on the processing list).

type rawPeer struct {
	rdb       *goredis.Client
	src, proc string
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

func newRawPeer(rdb *goredis.Client) *rawPeer {
	t := token("raw")
	return &rawPeer{rdb: rdb, src: t + ":q", proc: t + ":proc"}
}

func (p *rawPeer) token() string { return p.src[:len(p.src)-2] }

func rawPayload(id, sent int64) string {
	b, _ := json.Marshal(five(id, sent))
	return string(b)
}

func (p *rawPeer) send(ctx context.Context, id, sent int64) error {
	return p.rdb.LPush(ctx, p.src, rawPayload(id, sent)).Err()
}

func (p *rawPeer) preload(ctx context.Context, count int) error {
	pipe := p.rdb.Pipeline()
	for i := range count {
		pipe.LPush(ctx, p.src, rawPayload(int64(i), 0))
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (p *rawPeer) start(w int, run func(id, sent int64)) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for range w {
		p.wg.Go(func() {
			for ctx.Err() == nil {
				v, err := p.rdb.BLMove(ctx, p.src, p.proc, "RIGHT", "LEFT", time.Second).Result()
				if err != nil {
					continue
				}
				var a [5]int64
				if json.Unmarshal([]byte(v), &a) == nil {
					run(a[0], a[1])
				}
				p.rdb.LRem(ctx, p.proc, 1, v)
			}
		})
	}
	return nil
}

func (p *rawPeer) pending(ctx context.Context) (int, error) {
	n, err := p.rdb.LLen(ctx, p.src).Result()
	return int(n), err
}

func (p *rawPeer) stop() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
	}
}

// errand: the Redis broker and the Redis backend on one Redis, default
// options.

type errandPeer struct {
	srv    *errand.Server
	prefix string
	wk     *errand.Worker
}

func newErrandPeer(rdb *goredis.Client) *errandPeer {
	p := token("errand")
	srv, _ := errand.NewServer(errand.Config{
		Broker:  redisbroker.New(rdb, &redisbroker.Options{Prefix: p}),
		Backend: redisbackend.New(rdb, &redisbackend.Options{Prefix: p, ResultExpiry: 10 * time.Minute}),
	})
	return &errandPeer{srv: srv, prefix: p}
}

func (p *errandPeer) token() string { return p.prefix }

func errandSig(id, sent int64) *errand.Signature {
	return errand.NewSignature("noop5", id, sent, int64(3), int64(4), int64(5))
}

func (p *errandPeer) send(ctx context.Context, id, sent int64) error {
	_, err := p.srv.SendTask(ctx, errandSig(id, sent))
	return err
}

func (p *errandPeer) preload(ctx context.Context, count int) error {
	sigs := make([]*errand.Signature, count)
	for i := range sigs {
		sigs[i] = errandSig(int64(i), 0)
	}
	g, _ := errand.NewGroup(sigs...)
	_, err := p.srv.SendGroup(ctx, g, errand.SendConcurrency(4))
	return err
}

func (p *errandPeer) start(w int, run func(id, sent int64)) error {
	p.srv.Register("noop5", func(id, sent, _, _, _ int64) error { run(id, sent); return nil })
	p.wk = p.srv.NewWorker(errand.WorkerConfig{Concurrency: w})
	p.wk.Start()
	return nil
}

func (p *errandPeer) pending(ctx context.Context) (int, error) {
	q, err := p.srv.Queue(ctx, errand.DefaultQueue)
	if err != nil {
		return 0, err
	}
	return q.Stats.Pending, nil
}

func (p *errandPeer) stop() {
	if p.wk != nil {
		p.wk.Shutdown(context.Background())
	}
}

// asynq v0.26.0: a client and a server of its own (asynq's documented
// setup, RedisClientOpt), on a queue named after the token, every Config
// field at its default except Concurrency, Queues, the logger (silenced)
// and, for the latency variant only, TaskCheckInterval. The payload is the
// five arguments as JSON, as asynq's docs encode payloads.

type asynqPeer struct {
	opt    asynq.RedisClientOpt
	rdb    *goredis.Client
	client *asynq.Client
	srv    *asynq.Server
	q      string
	check  time.Duration
}

func asynqOpt(r *report) asynq.RedisClientOpt {
	o := r.rdb.Options()
	return asynq.RedisClientOpt{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB}
}

func newAsynqPeer(r *report, check time.Duration) (*asynqPeer, error) {
	opt := asynqOpt(r)
	return &asynqPeer{opt: opt, rdb: r.rdb, client: asynq.NewClient(opt), q: token("asynq"), check: check}, nil
}

func (p *asynqPeer) token() string { return p.q }

func (p *asynqPeer) send(ctx context.Context, id, sent int64) error {
	b, _ := json.Marshal(five(id, sent))
	_, err := p.client.EnqueueContext(ctx, asynq.NewTask("noop5", b), asynq.Queue(p.q))
	return err
}

func (p *asynqPeer) preload(ctx context.Context, count int) error {
	return concurrentlyN(count, producers, func(i int) error { return p.send(ctx, int64(i), 0) })
}

func (p *asynqPeer) start(w int, run func(id, sent int64)) error {
	p.srv = asynq.NewServer(p.opt, asynq.Config{
		Concurrency:       w,
		Queues:            map[string]int{p.q: 1},
		Logger:            quietLogger{},
		TaskCheckInterval: p.check,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop5", func(_ context.Context, t *asynq.Task) error {
		var a [5]int64
		if err := json.Unmarshal(t.Payload(), &a); err != nil {
			return err
		}
		run(a[0], a[1])
		return nil
	})
	return p.srv.Start(mux)
}

func (p *asynqPeer) pending(ctx context.Context) (int, error) {
	n, err := p.rdb.LLen(ctx, "asynq:{"+p.q+"}:pending").Result()
	return int(n), err
}

func (p *asynqPeer) stop() {
	if p.srv != nil {
		p.srv.Shutdown()
	}
	p.client.Close()
	// asynq keeps every queue it has seen in one set; drop ours.
	p.rdb.SRem(context.Background(), "asynq:queues", p.q)
}

type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(a ...any) {
	fmt.Fprintln(os.Stderr, a...)
	os.Exit(1)
}

// machinery v2.0.16: the go-redis broker and backend (NewGR, as machinery's
// go-redis example sets them up) and the eager lock; every config field at
// its default except the queue and delayed-task key names (so that runs do
// not share keys) and NoUnixSignals (a worker per scenario must not install
// a signal handler each). One producer server sends every peer's tasks, as
// a service would; each start builds a consuming server of its own, whose
// broker client machinery closes when the worker quits. Task UUIDs (the
// backend's state keys) are named under the token.

var machineryShared struct {
	once     sync.Once
	producer *machinery.Server
	backend  mbackendiface.Backend
	addr     string
	db       int
}

func machineryInit(r *report) {
	machineryShared.once.Do(func() {
		mlog.Set(quietMachineryLogger{})
		o := r.rdb.Options()
		addr := o.Addr
		if o.Password != "" {
			addr = o.Username + ":" + o.Password + "@" + addr
		}
		machineryShared.addr, machineryShared.db = addr, o.DB
		cnf := &mconfig.Config{DefaultQueue: "bench-machinery-default", ResultsExpireIn: 3600, NoUnixSignals: true}
		machineryShared.backend = mredisbackend.NewGR(cnf, []string{addr}, o.DB)
		broker := mredisbroker.NewGR(cnf, []string{addr}, o.DB)
		machineryShared.producer = machinery.NewServer(cnf, broker, machineryShared.backend, eagerlock.New())
	})
}

type machineryPeer struct {
	rdb    *goredis.Client
	q      string
	worker *machinery.Worker
	errs   chan error
}

func newMachineryPeer(r *report) (*machineryPeer, error) {
	machineryInit(r)
	return &machineryPeer{rdb: r.rdb, q: token("machinery")}, nil
}

func (p *machineryPeer) token() string { return p.q }

func (p *machineryPeer) sig(id, sent int64) *mtasks.Signature {
	args := make([]mtasks.Arg, 5)
	for i, v := range five(id, sent) {
		args[i] = mtasks.Arg{Type: "int64", Value: v}
	}
	return &mtasks.Signature{UUID: p.q + ":" + strconv.FormatInt(id, 10), Name: "noop5", RoutingKey: p.q, Args: args}
}

func (p *machineryPeer) send(ctx context.Context, id, sent int64) error {
	_, err := machineryShared.producer.SendTaskWithContext(ctx, p.sig(id, sent))
	return err
}

func (p *machineryPeer) preload(ctx context.Context, count int) error {
	return concurrentlyN(count, producers, func(i int) error { return p.send(ctx, int64(i), 0) })
}

// serve starts a worker of w slots on the peer's queue with tasks.
func (p *machineryPeer) serve(w int, tasks map[string]any) error {
	cnf := &mconfig.Config{
		DefaultQueue:    p.q,
		ResultsExpireIn: 3600,
		NoUnixSignals:   true,
		Redis:           &mconfig.RedisConfig{DelayedTasksKey: p.q + ":delayed"},
	}
	broker := mredisbroker.NewGR(cnf, []string{machineryShared.addr}, machineryShared.db)
	srv := machinery.NewServer(cnf, broker, machineryShared.backend, eagerlock.New())
	if err := srv.RegisterTasks(tasks); err != nil {
		return err
	}
	p.worker = srv.NewWorker("bench", w)
	p.errs = make(chan error, 4)
	p.worker.LaunchAsync(p.errs)
	return nil
}

func (p *machineryPeer) start(w int, run func(id, sent int64)) error {
	return p.serve(w, map[string]any{"noop5": func(id, sent, _, _, _ int64) error { run(id, sent); return nil }})
}

func (p *machineryPeer) pending(ctx context.Context) (int, error) {
	n, err := p.rdb.LLen(ctx, p.q).Result()
	return int(n), err
}

func (p *machineryPeer) stop() {
	if p.worker == nil {
		return
	}
	p.worker.Quit()
	select {
	case <-p.errs:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "bench: machinery worker did not stop within 30 s")
	}
}

type quietMachineryLogger struct{}

func (quietMachineryLogger) Print(...any)          {}
func (quietMachineryLogger) Printf(string, ...any) {}
func (quietMachineryLogger) Println(...any)        {}
func (quietMachineryLogger) Fatal(a ...any)        { fmt.Fprintln(os.Stderr, a...); os.Exit(1) }
func (quietMachineryLogger) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
	os.Exit(1)
}
func (quietMachineryLogger) Fatalln(a ...any)          { fmt.Fprintln(os.Stderr, a...); os.Exit(1) }
func (quietMachineryLogger) Panic(a ...any)            { panic(fmt.Sprint(a...)) }
func (quietMachineryLogger) Panicf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (quietMachineryLogger) Panicln(a ...any)          { panic(fmt.Sprintln(a...)) }

package e2e_test

// Issue 31, item 4: a Redis ACL user limited to errand's keys and to the
// commands errand runs sends and runs everything: the narrowest user
// docs/redis.md documents ("ACL users"), on a private redis-server, runs a
// task, a chain, a group and a chord end to end, a unique task and a
// rate-limited one, a schedule, and the operator's calls the errand
// command makes; Redis's ACL LOG then holds no denial. A user whose key
// patterns miss errand's global keys gets Redis's NOPERM naming the key,
// not EXECABORT.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/redis"
	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/schedule"
)

// aclKeys are the key patterns of the narrowest user for prefix p
// (docs/redis.md, "ACL users"): the broker's queue keys {p:QUEUE}:* (and
// the backend's group keys {p:group:GROUP}:*), the keys of no single
// queue {p}:*, and the backend's task states p:task:*.
func aclKeys(p string) []string { return []string{"~{" + p + ":*", "~{" + p + "}:*", "~" + p + ":*"} }

// aclChannels are the Pub/Sub channels of the narrowest user for prefix
// p: the broker's cancel notices, p:cancel.
func aclChannels(p string) []string { return []string{"&" + p + ":cancel"} }

// aclCluster are the commands a Redis Cluster client sends besides: the
// slot map, and the commands' key positions.
var aclCluster = []string{"+cluster|slots", "+command"}

// aclCommands are the commands of the narrowest user (docs/redis.md, "ACL
// users"): what the broker, the backend and the scheduler send, and what
// their scripts call.
var aclCommands = []string{
	// connecting, scripts, transactions, cancel notices
	"+hello", "+ping", "+evalsha", "+eval", "+multi", "+exec", "+subscribe", "+publish",
	// keys, strings
	"+del", "+exists", "+type", "+pexpire", "+pttl", "+scan", "+time",
	"+get", "+set", "+mget", "+incr", "+incrby",
	// lists
	"+lpush", "+rpush", "+lpop", "+blpop", "+lrange", "+lindex", "+llen", "+ltrim",
	// hashes
	"+hset", "+hget", "+hmget", "+hgetall", "+hdel", "+hexists", "+hstrlen",
	// sets
	"+sadd", "+srem", "+smembers", "+sismember", "+scard",
	// sorted sets
	"+zadd", "+zrem", "+zcard", "+zcount", "+zscore", "+zrange", "+zrevrange",
	"+zrangebyscore", "+zremrangebyscore", "+zpopmin",
}

// aclCategories is the documented alternative by categories.
var aclCategories = []string{"+@read", "+@write", "+@scripting", "+@transaction", "+@connection", "+time", "-@dangerous", "+subscribe", "+publish"}

// aclRedis starts a private redis-server whose default user is an admin
// (the test's own client, which creates the users under test) and returns
// that client.
func aclRedis(t *testing.T) *goredis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		conformance.ServiceUnavailable(t, "redis-server not installed (scripts/services start installs it)")
	}
	addr := conformance.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { admin.Close() })
	conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "--port", port, "--bind", host, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	}, func(ctx context.Context) error { return admin.Ping(ctx).Err() })
	return admin
}

// aclUser creates user (password pw-user) with rules and returns the URL
// that logs in as it, with prefix=app1.
func aclUser(ctx context.Context, t *testing.T, admin *goredis.Client, user string, rules ...string) string {
	t.Helper()
	if err := admin.Do(ctx, setUser(user, rules)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s %v: %v", user, rules, err)
	}
	u := url.URL{Scheme: "redis", User: url.UserPassword(user, "pw-"+user), Host: admin.Options().Addr, Path: "/0", RawQuery: "prefix=app1"}
	return u.String()
}

func setUser(user string, rules []string) []any {
	args := []any{"acl", "setuser", user, "reset", "on", ">pw-" + user}
	for _, r := range rules {
		args = append(args, r)
	}
	return args
}

// aclServer opens a broker and a backend as the user of raw and returns
// a Server on them.
func aclServer(ctx context.Context, t *testing.T, raw string) *errand.Server {
	t.Helper()
	broker, err := errand.OpenBroker(ctx, raw)
	if err != nil {
		t.Fatalf("OpenBroker as the ACL user: %v", err)
	}
	backend, err := errand.OpenBackend(ctx, raw)
	if err != nil {
		broker.Close()
		t.Fatalf("OpenBackend as the ACL user: %v", err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend, DefaultQueue: "tasks"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestRedisACLNarrowestUser: the documented user, by commands and by
// categories, runs every kind of send, a schedule and the operator's
// calls; no command of any of them is denied (ACL LOG stays empty).
func TestRedisACLNarrowestUser(t *testing.T) {
	t.Parallel()
	admin := aclRedis(t)
	for _, c := range []struct {
		name  string
		rules []string
	}{
		{"commands", slices.Concat([]string{"resetchannels", "-@all"}, aclKeys("app1"), aclChannels("app1"), aclCommands)},
		{"categories", slices.Concat([]string{"resetchannels", "-@all"}, aclKeys("app1"), aclChannels("app1"), aclCategories)},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := admin.Do(ctx, "acl", "log", "reset").Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.FlushAll(ctx).Err(); err != nil { // the test's own server
				t.Fatal(err)
			}
			runAsACLUser(ctx, t, aclServer(ctx, t, aclUser(ctx, t, admin, "errand-"+c.name, c.rules...)))
			log, err := admin.Do(ctx, "acl", "log").Slice()
			if err != nil {
				t.Fatal(err)
			}
			if len(log) > 0 {
				t.Errorf("ACL promise broken: the documented user (%s) was denied %d times; the first: %v", strings.Join(c.rules, " "), len(log), log[0])
			}
		})
	}
}

// TestRedisACLNarrowestUserCluster: the documented user on the shared
// Redis Cluster (created on each node under a name of the test's own, and
// deleted after), with a prefix of its own: the keys are the same as on
// one node, and the cluster client needs two commands more (aclCluster).
func TestRedisACLNarrowestUserCluster(t *testing.T) {
	t.Parallel()
	addrs := strings.Split(os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS"), ",")
	if addrs[0] == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_CLUSTER_ADDRS not set (scripts/services start exports it)")
	}
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admin.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(t, "Redis Cluster unreachable: "+err.Error())
	}
	id := rand.Text()[:8]
	user, prefix := "errand-acl-"+id, "acl-"+id
	rules := slices.Concat([]string{"resetchannels", "-@all"}, aclKeys(prefix), aclChannels(prefix), aclCommands, aclCluster)
	each := func(ctx context.Context, args ...any) error {
		return admin.ForEachShard(ctx, func(ctx context.Context, node *goredis.Client) error { return node.Do(ctx, args...).Err() })
	}
	if err := each(ctx, setUser(user, rules)...); err != nil {
		t.Fatalf("ACL SETUSER on each node: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		each(ctx, "acl", "deluser", user)
		admin.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			for _, pat := range []string{"{" + prefix + ":*", "{" + prefix + "}:*", prefix + ":*"} {
				keys, _ := node.Keys(ctx, pat).Result()
				for _, k := range keys {
					node.Del(ctx, k)
				}
			}
			return nil
		})
	})
	u := url.URL{Scheme: "redis", User: url.UserPassword(user, "pw-"+user), Host: addrs[0]}
	u.RawQuery = url.Values{"prefix": {prefix}, "addr": addrs[1:]}.Encode()
	runAsACLUser(ctx, t, aclServer(ctx, t, u.String()))
	var denied []string
	admin.ForEachShard(ctx, func(ctx context.Context, node *goredis.Client) error {
		log, _ := node.Do(ctx, "acl", "log", "128").Slice()
		for _, e := range log {
			if s := fmt.Sprint(e); strings.Contains(s, user) {
				denied = append(denied, s)
			}
		}
		return nil
	})
	if len(denied) > 0 {
		t.Errorf("ACL promise broken: the documented user (%s) was denied %d times on the cluster; the first: %s", strings.Join(rules, " "), len(denied), denied[0])
	}
}

// runAsACLUser sends and runs a task, a chain, a group, a chord, a unique
// task, a rate-limited task, a task under a concurrency limit, a task that
// fails for good (archived) and a schedule's tick on srv, cancels a
// scheduled task and a running one (its worker hears the broker's notice:
// no error reported), and makes the operator's calls.
func runAsACLUser(ctx context.Context, t *testing.T, srv *errand.Server) {
	t.Helper()
	add := func(a, b int) (int, error) { return a + b, nil }
	sum := func(xs ...int) (int, error) {
		n := 0
		for _, x := range xs {
			n += x
		}
		return n, nil
	}
	var beats atomic.Int32
	beat := make(chan struct{}, 1)
	for name, fn := range map[string]any{
		"add": add, "sum": sum,
		"fail": func() error { return errand.Permanent(errors.New("no")) },
		"beat": func() error {
			beats.Add(1)
			select {
			case beat <- struct{}{}:
			default:
			}
			return nil
		},
	} {
		if err := srv.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Register("limited", add, errand.WithRateLimit(100, 10)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register("capped", add, errand.WithConcurrencyLimit(1)); err != nil {
		t.Fatal(err)
	}
	holding, causes := make(chan struct{}, 1), make(chan error, 1)
	if err := srv.Register("hold", func(ctx context.Context) error {
		holding <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	var reported atomic.Value // the first error the worker reported
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, ErrorHandler: func(err error) { reported.CompareAndSwap(nil, err) }})
	w.Start()
	defer w.Shutdown(context.Background())

	get := func(what string, r *errand.AsyncResult, want int) {
		t.Helper()
		var got int
		if err := r.GetInto(ctx, &got); err != nil || got != want {
			t.Fatalf("ACL promise broken: %s as the narrow user: %d, %v; want %d", what, got, err, want)
		}
	}
	r, err := srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	if err != nil {
		t.Fatalf("ACL promise broken: SendTask as the narrow user: %v", err)
	}
	get("a task", r, 3)
	task := r.Signature.UUID

	chain, err := errand.NewChain(errand.NewSignature("add", 1, 2), errand.NewSignature("add", 3))
	if err != nil {
		t.Fatal(err)
	}
	cr, err := srv.SendChain(ctx, chain)
	if err != nil {
		t.Fatalf("ACL promise broken: SendChain as the narrow user: %v", err)
	}
	get("a chain", cr.Results[len(cr.Results)-1], 6)

	members := func() []*errand.Signature {
		var ms []*errand.Signature
		for i := 1; i <= 4; i++ {
			ms = append(ms, errand.NewSignature("add", i, i))
		}
		return ms
	}
	group, err := errand.NewGroup(members()...)
	if err != nil {
		t.Fatal(err)
	}
	grs, err := srv.SendGroup(ctx, group)
	if err != nil {
		t.Fatalf("ACL promise broken: SendGroup as the narrow user: %v", err)
	}
	for i, gr := range grs {
		get(fmt.Sprint("group member ", i), gr, 2*(i+1))
	}
	group, err = errand.NewGroup(members()...)
	if err != nil {
		t.Fatal(err)
	}
	chord, err := errand.NewChord(group, errand.NewSignature("sum"))
	if err != nil {
		t.Fatal(err)
	}
	chr, err := srv.SendChord(ctx, chord)
	if err != nil {
		t.Fatalf("ACL promise broken: SendChord as the narrow user: %v", err)
	}
	get("a chord", chr.Callback, 20)

	unique := errand.NewSignature("add", 2, 2)
	unique.UniqueKey, unique.UniqueFor = "once", time.Minute
	r, err = srv.SendTask(ctx, unique)
	if err != nil {
		t.Fatalf("ACL promise broken: a unique task as the narrow user: %v", err)
	}
	get("a unique task", r, 4)
	r, err = srv.SendTask(ctx, errand.NewSignature("limited", 5, 5))
	if err != nil {
		t.Fatalf("ACL promise broken: a rate-limited task as the narrow user: %v", err)
	}
	get("a rate-limited task", r, 10)
	r, err = srv.SendTask(ctx, errand.NewSignature("capped", 6, 6))
	if err != nil {
		t.Fatalf("ACL promise broken: a task under a concurrency limit as the narrow user: %v", err)
	}
	get("a task under a concurrency limit", r, 12)

	// Cancels: a scheduled task, then a running one, whose ctx ends on the
	// broker's notice.
	later := errand.NewSignature("add", 1, 1)
	eta := time.Now().Add(time.Hour)
	later.ETA = &eta
	if r, err = srv.SendTask(ctx, later); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.Cancel(ctx); err != nil || rep.Outcome != errand.CancelQueued {
		t.Fatalf("ACL promise broken: cancelling a scheduled task as the narrow user: %+v, %v; want queued", rep, err)
	}
	if r, err = srv.SendTask(ctx, errand.NewSignature("hold")); err != nil {
		t.Fatal(err)
	}
	<-holding
	if rep, err := r.Cancel(ctx); err != nil || rep.Outcome != errand.CancelRunning {
		t.Fatalf("ACL promise broken: cancelling a running task as the narrow user: %+v, %v; want running", rep, err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, errand.ErrCancelled) {
			t.Fatalf("the cancelled task's ctx ended with %v; want ErrCancelled", cause)
		}
	case <-ctx.Done():
		t.Fatal("ACL promise broken: a running task cancelled as the narrow user never had its ctx cancelled")
	}
	if err, _ := reported.Load().(error); err != nil {
		t.Fatalf("ACL promise broken: the worker of the narrow user reported %v", err)
	}
	r, err = srv.SendTask(ctx, errand.NewSignature("fail"))
	if err != nil {
		t.Fatalf("ACL promise broken: SendTask as the narrow user: %v", err)
	}
	if _, err := r.Get(ctx); err == nil {
		t.Fatal("the failing task succeeded")
	}
	failed := r.Signature.UUID

	// A schedule: set, listed, one tick sent and run, removed.
	sched, err := schedule.New(srv, schedule.Config{Reload: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.Set(ctx, schedule.Entry{ID: "beat", Spec: "@every 1s", Signature: errand.NewSignature("beat")}); err != nil {
		t.Fatalf("ACL promise broken: setting a schedule as the narrow user: %v", err)
	}
	if es, err := sched.List(ctx); err != nil || len(es) != 1 {
		t.Fatalf("ACL promise broken: listing the schedules as the narrow user: %v, %v", es, err)
	}
	sctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- sched.Run(sctx) }()
	select {
	case <-beat:
	case <-ctx.Done():
		t.Fatal("ACL promise broken: no tick of an @every 1s schedule ran as the narrow user")
	}
	stop()
	<-ran
	if err := sched.Remove(ctx, "beat"); err != nil {
		t.Fatalf("ACL promise broken: removing a schedule as the narrow user: %v", err)
	}

	// The operator's calls (what errand queues, ls, show, workers, pause
	// and requeue make).
	if _, err := srv.Queues(ctx); err != nil {
		t.Fatalf("ACL promise broken: Server.Queues as the narrow user: %v", err)
	}
	if _, err := srv.Queue(ctx, "tasks"); err != nil {
		t.Fatalf("ACL promise broken: Server.Queue as the narrow user: %v", err)
	}
	for _, l := range errand.ListStates() {
		if _, err := srv.List(ctx, "tasks", l, 0, 10); err != nil {
			t.Fatalf("ACL promise broken: Server.List %s as the narrow user: %v", l, err)
		}
	}
	if _, err := srv.Task(ctx, "tasks", task); err != nil {
		t.Fatalf("ACL promise broken: Server.Task as the narrow user: %v", err)
	}
	if _, err := srv.Workers(ctx); err != nil {
		t.Fatalf("ACL promise broken: Server.Workers as the narrow user: %v", err)
	}
	if err := srv.Pause(ctx, "tasks"); err != nil {
		t.Fatalf("ACL promise broken: Server.Pause as the narrow user: %v", err)
	}
	if err := srv.Resume(ctx, "tasks"); err != nil {
		t.Fatalf("ACL promise broken: Server.Resume as the narrow user: %v", err)
	}
	if _, err := srv.ArchivedTask(ctx, "tasks", failed); err != nil {
		t.Fatalf("ACL promise broken: Server.ArchivedTask as the narrow user: %v", err)
	}
	if n, err := srv.DeleteArchived(ctx, "tasks", failed); err != nil || n != 1 {
		t.Fatalf("ACL promise broken: Server.DeleteArchived as the narrow user: %d, %v", n, err)
	}
	if _, err := srv.Purge(ctx, "tasks"); err != nil {
		t.Fatalf("ACL promise broken: Server.Purge as the narrow user: %v", err)
	}
}

// TestRedisACLNoPermNamesTheKey: the user of issue 31 (key patterns for the
// queue keys and the backend's, none for the keys of no single queue)
// cannot send; every send fails with Redis's NOPERM and the name of the
// key it may not touch, not the EXECABORT that hid them.
func TestRedisACLNoPermNamesTheKey(t *testing.T) {
	t.Parallel()
	admin := aclRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := aclServer(ctx, t, aclUser(ctx, t, admin, "too-narrow", "~{app1:*", "~app1:*", "resetchannels", "+@all"))
	group, err := errand.NewGroup(errand.NewSignature("add", 1, 1), errand.NewSignature("add", 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	chord, err := errand.NewChord(group, errand.NewSignature("sum"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.SendChord(ctx, chord)
	if err == nil {
		t.Fatal("SendChord as a user without the key {app1}:queues succeeded; the test's user is not too narrow")
	}
	t.Logf("SendChord as the too narrow user: %v", err)
	if msg := err.Error(); !strings.Contains(msg, "NOPERM") || !strings.Contains(msg, "{app1}:queues") {
		t.Errorf("ACL promise broken: SendChord as a user who may not touch {app1}:queues failed with %q; want Redis's NOPERM and the key's name", msg)
	}
	if _, err := srv.SendTask(ctx, errand.NewSignature("add", 1, 2)); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "{app1}:queues") {
		t.Errorf("ACL promise broken: SendTask as a user who may not touch {app1}:queues: %v; want Redis's NOPERM and the key's name", err)
	}
	// A script refused: a user without the queue keys fetches; the error
	// names the script's keys.
	broker, err := errand.OpenBroker(ctx, aclUser(ctx, t, admin, "no-queues", "~{app1}:*", "~app1:*", "resetchannels", "+@all"))
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if _, err := broker.Fetch(ctx, "tasks", 1, time.Second); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "{app1:tasks}:pending") {
		t.Errorf("ACL promise broken: Fetch as a user who may not touch the queue's keys: %v; want Redis's NOPERM and the keys' names", err)
	}
}

// warnings records the messages of the warnings logged to it.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}

// matching returns the warnings whose message contains s.
func (w *warnings) matching(s string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// TestRedisACLWithoutCancelChannel: a user with errand's keys and
// commands but no Pub/Sub channel (an ACL written before the cancel
// notices, or a provider that forbids Pub/Sub) loses only the notices: its
// worker starts and runs tasks, logging one warning that it hears none;
// Server.Cancel records the cancel and answers it (running, a nil error),
// logging that the workers were not notified; the running task's ctx is
// cancelled at its next lease extension instead.
func TestRedisACLWithoutCancelChannel(t *testing.T) {
	t.Parallel()
	admin := aclRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw := aclUser(ctx, t, admin, "no-channels", slices.Concat([]string{"resetchannels", "-@all"}, aclKeys("app1"), aclCommands)...)
	broker, err := errand.OpenBroker(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	backend, err := errand.OpenBackend(ctx, raw)
	if err != nil {
		broker.Close()
		t.Fatal(err)
	}
	srvLog, workerLog := &warnings{}, &warnings{}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend, DefaultQueue: "tasks", Logger: slog.New(srvLog)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	holding, causes := make(chan struct{}, 1), make(chan error, 1)
	srv.Register("add", func(a, b int) (int, error) { return a + b, nil })
	srv.Register("hold", func(ctx context.Context) error {
		holding <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2, Lease: 300 * time.Millisecond, ExtendEvery: 50 * time.Millisecond, Logger: slog.New(workerLog)})
	w.Start()
	defer w.Shutdown(context.Background())

	r, err := srv.SendTask(ctx, errand.NewSignature("add", 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := r.GetInto(ctx, &got); err != nil || got != 3 {
		t.Fatalf("a worker whose broker refuses its cancel channel must still run tasks: %d, %v; want 3", got, err)
	}
	if r, err = srv.SendTask(ctx, errand.NewSignature("hold")); err != nil {
		t.Fatal(err)
	}
	<-holding
	rep, err := r.Cancel(ctx)
	if err != nil || rep.Outcome != errand.CancelRunning {
		t.Fatalf("cancel promise broken: Cancel of a running task whose notice the broker refused = %+v, %v; want running and a nil error (the cancel is recorded)", rep, err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, errand.ErrCancelled) {
			t.Fatalf("the cancelled task's ctx ended with %v; want ErrCancelled", cause)
		}
	case <-ctx.Done():
		t.Fatal("cancel promise broken: without notices, a running task's ctx must be cancelled at its next lease extension; it never was")
	}
	if st, err := r.State(ctx); err != nil || st.State != errand.StateCancelled {
		t.Fatalf("the cancelled task's state: %+v, %v; want CANCELLED", st, err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := workerLog.matching("cancel notices"); len(ws) != 1 {
		t.Errorf("a worker that cannot listen for cancel notices must log one warning saying so; it logged %d: %q", len(ws), ws)
	}
	if ws := srvLog.matching("not notified"); len(ws) != 1 {
		t.Errorf("a Cancel whose notice the broker refused must log one warning saying the workers were not notified; the server logged %d: %q", len(ws), ws)
	}
}

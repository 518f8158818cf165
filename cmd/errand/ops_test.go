package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
	"github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// The operator commands, each run in-process (run, or cli.main with an
// injected server) against a deployment seeded by an in-process errand
// Server and Worker: over the memory drivers (the server injected), and
// over the real Redis of ERRAND_REDIS_URL (the command opens the broker and
// backend by URL, a key prefix of its own per test).

// deployment is one test's broker and backend, with a server seeding them
// and the command's way in.
type deployment struct {
	t    *testing.T
	kind string
	srv  *errand.Server
	// url opens the deployment (Redis); "" for memory, where the command
	// uses srv.
	url   string
	queue string
	// env adds to the command's environment (over ERRAND_BROKER_URL).
	env map[string]string
}

// eachDeployment runs f over the memory drivers and over Redis.
func eachDeployment(t *testing.T, f func(t *testing.T, d *deployment)) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, memoryDeployment(t))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		f(t, redisDeployment(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, postgresDeployment(t))
	})
}

// postgresDeployment is a schema of the test's own on the PostgreSQL of
// ERRAND_POSTGRES_URL, created by errand migrate, the broker and the
// backend opened by its URL.
func postgresDeployment(t *testing.T) *deployment {
	raw := os.Getenv("ERRAND_POSTGRES_URL")
	if raw == "" {
		needServices(t, "ERRAND_POSTGRES_URL is not set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("ERRAND_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("schema", pgdbtest.EmptySchema(t, pgdbtest.Pool(t)))
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"migrate", "--broker", u.String()}, &out, &errOut, func(string) string { return "" }); code != exitOK {
		t.Fatalf("errand migrate --broker %s: exit %d\n%s%s", errand.RedactURL(u.String()), code, out.String(), errOut.String())
	}
	broker, err := errand.OpenBroker(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	backend, err := errand.OpenBackend(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return &deployment{t: t, kind: "postgres", srv: srv, url: u.String(), queue: queueName(t)}
}

func queueName(t *testing.T) string {
	return "cli-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

func memoryDeployment(t *testing.T) *deployment {
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return &deployment{t: t, kind: "memory", srv: srv, queue: queueName(t)}
}

// needServices fails the test when ERRAND_REQUIRE_SERVICES=1, and skips it
// with the reason otherwise.
func needServices(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("ERRAND_REQUIRE_SERVICES") == "1" {
		t.Fatalf("ERRAND_REQUIRE_SERVICES=1: "+format, a...)
	}
	t.Skipf(format+" (scripts/services start; . .services/env)", a...)
}

func redisDeployment(t *testing.T) *deployment {
	raw := os.Getenv("ERRAND_REDIS_URL")
	if raw == "" {
		needServices(t, "ERRAND_REDIS_URL is not set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	q := u.Query()
	prefix := fmt.Sprintf("errand-test-cli-%s-%d", rand.Text()[:8], time.Now().UnixNano())
	q.Set("prefix", prefix)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drv, err := redisbroker.Open(ctx, u)
	if err != nil {
		needServices(t, "Redis at %s is unreachable: %v", errand.RedactURL(raw), err)
	}
	_, archiver := drv.(driver.Archiver)
	_, lister := drv.(driver.Lister)
	_, queues := drv.(driver.QueueLister)
	_, pauser := drv.(driver.Pauser)
	_, beats := drv.(driver.Heartbeater)
	drv.Close()
	if !archiver || !lister || !queues || !pauser || !beats {
		t.Skipf("brokers/redis lacks operator capabilities yet (Archiver %v, Lister %v, QueueLister %v, Pauser %v, Heartbeater %v): these cases run once it has them",
			archiver, lister, queues, pauser, beats)
	}
	broker, err := errand.OpenBroker(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	backend, err := errand.OpenBackend(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{t: t, kind: "redis", srv: srv, url: u.String(), queue: queueName(t)}
	t.Cleanup(func() {
		srv.Close()
		dropKeys(t, raw, prefix)
	})
	return d
}

// dropKeys deletes every key of the Redis at rawURL whose name holds
// prefix (the broker's {prefix:queue} keys, the backend's prefix:...).
func dropKeys(t *testing.T, rawURL, prefix string) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, "*"+prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: scan %s keys: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("cleanup: delete %s keys: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

// result is what one run of the command did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the command with args: over the injected server (memory), or
// with ERRAND_BROKER_URL naming the deployment (Redis; the backend is the
// broker's URL by default).
func (d *deployment) run(args ...string) result {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	var code int
	env := map[string]string{}
	for k, v := range d.env {
		env[k] = v
	}
	getenv := func(k string) string { return env[k] }
	if d.url == "" {
		code = (&cli{ctx: ctx, stdout: &out, stderr: &errOut, env: getenv, broker: d.srv.Broker(), backend: d.srv.Backend()}).main(args)
	} else {
		env["ERRAND_BROKER_URL"] = d.url
		code = run(ctx, args, &out, &errOut, getenv)
	}
	return result{code, out.String(), errOut.String()}
}

// ok runs the command and fails the test unless it exits 0.
func (d *deployment) ok(args ...string) result {
	d.t.Helper()
	r := d.run(args...)
	if r.code != 0 {
		d.t.Fatalf("errand %s: want exit 0 (the operation succeeds), got:\n%s", strings.Join(args, " "), r)
	}
	return r
}

// json runs the command with -o json and decodes its output into v.
func (d *deployment) json(v any, args ...string) {
	d.t.Helper()
	r := d.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		d.t.Fatalf("errand %s -o json: output is not the JSON of a %T: %v\n%s", strings.Join(args, " "), v, err, r.stdout)
	}
}

// fails runs the command and fails the test unless it exits code with
// every one of want in its stderr.
func (d *deployment) fails(code int, want []string, args ...string) result {
	d.t.Helper()
	r := d.run(args...)
	if r.code != code {
		d.t.Fatalf("errand %s: want exit %d, got:\n%s", strings.Join(args, " "), code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			d.t.Errorf("errand %s: stderr should say %q, got:\n%s", strings.Join(args, " "), w, r)
		}
	}
	if strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		d.t.Errorf("errand %s: an error is one line on stderr, got:\n%s", strings.Join(args, " "), r.stderr)
	}
	return r
}

// send sends task name with args to the deployment's queue, delayed by
// delay when positive, and returns its ID.
func (d *deployment) send(name string, delay time.Duration, args ...any) string {
	d.t.Helper()
	sig := errand.NewSignature(name, args...)
	sig.RoutingKey = d.queue
	if delay > 0 {
		eta := time.Now().Add(delay)
		sig.ETA = &eta
	}
	if _, err := d.srv.SendTask(context.Background(), sig); err != nil {
		d.t.Fatalf("send %s: %v", name, err)
	}
	return sig.UUID
}

// worker registers tasks and starts a worker on the deployment's queue,
// shut down when the test ends.
func (d *deployment) worker(tasks map[string]any) *errand.Worker {
	d.t.Helper()
	if err := d.srv.RegisterTasks(tasks); err != nil {
		d.t.Fatal(err)
	}
	w := d.srv.NewWorker(errand.WorkerConfig{
		Queues: map[string]int{d.queue: 1}, Concurrency: 4, RetryPolicy: errand.Fixed(10 * time.Millisecond),
		PausePoll: 20 * time.Millisecond, Heartbeat: 50 * time.Millisecond,
	})
	w.Start()
	d.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Shutdown(ctx)
	})
	return w
}

// archived waits until the queue's archive holds the tasks ids.
func (d *deployment) archived(ids ...string) {
	d.t.Helper()
	eventually(d.t, fmt.Sprintf("tasks %v archived", ids), func() bool {
		ts, err := d.srv.List(context.Background(), d.queue, errand.ListArchived, 0, 100)
		if err != nil {
			d.t.Fatalf("List archived: %v", err)
		}
		n := 0
		for _, t := range ts {
			if slices.Contains(ids, t.ID) {
				n++
			}
		}
		return n == len(ids)
	})
}

// state waits until task id's recorded state is want and returns it.
func (d *deployment) state(id string, want errand.State) *errand.TaskState {
	d.t.Helper()
	var st *errand.TaskState
	eventually(d.t, fmt.Sprintf("task %s reaches %s", id, want), func() bool {
		var err error
		st, err = d.srv.Backend().GetState(context.Background(), id)
		return err == nil && st.State == want
	})
	return st
}

// list returns the IDs of the queue's tasks in list l.
func (d *deployment) list(l errand.ListState) []string {
	d.t.Helper()
	ts, err := d.srv.List(context.Background(), d.queue, l, 0, 1000)
	if err != nil {
		d.t.Fatalf("List %s: %v", l, err)
	}
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

// scaled multiplies d by ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1), for
// slow machines.
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("ERRAND_CONFORMANCE_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// eventually polls cond until it holds, failing the test after a deadline
// (20s, scaled).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := scaled(20 * time.Second)
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: it did not happen", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failing is a task that fails for good (no retry): its tasks go to the
// archive.
func failing() (string, error) { return "", errand.Permanent(errors.New("boom: the disk is full")) }

// row returns the line of table out that starts with first, or "".
func row(out, first string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

func TestQueues(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.send("add", 0, 1, 2)
		d.send("add", 0, 3, 4)
		d.send("add", time.Hour, 5, 6)
		r := d.ok("queues")
		if got := row(r.stdout, d.queue); !slices.Equal(got, []string{d.queue, "no", "2", "1", "0", "0", "0", "0"}) {
			t.Errorf("queues: want the row %s no 2 1 0 0 0 0 (2 pending, 1 delayed), got %q in:\n%s", d.queue, got, r.stdout)
		}
		if !strings.HasPrefix(r.stdout, "QUEUE ") {
			t.Errorf("queues: the table starts with its header, got:\n%s", r.stdout)
		}
		var qs []queueJSON
		d.json(&qs, "queues")
		i := slices.IndexFunc(qs, func(q queueJSON) bool { return q.Name == d.queue })
		if i < 0 || qs[i] != (queueJSON{Name: d.queue, Pending: 2, Delayed: 1}) {
			t.Errorf("queues -o json: want %s with pending 2, delayed 1, got %+v", d.queue, qs)
		}
	})
}

func TestStats(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.send("add", 0, 1, 2)
		d.send("add", time.Hour, 3, 4)
		r := d.ok("stats", d.queue)
		for _, want := range [][]string{{"queue", d.queue}, {"paused", "no"}, {"pending", "1"}, {"delayed", "1"}, {"archived", "0"}} {
			if got := row(r.stdout, want[0]); len(got) < 2 || got[1] != want[1] {
				t.Errorf("stats %s: want the line %q, got %q in:\n%s", d.queue, want, got, r.stdout)
			}
		}
		var q queueJSON
		d.json(&q, "stats", d.queue)
		if q != (queueJSON{Name: d.queue, Pending: 1, Delayed: 1}) {
			t.Errorf("stats %s -o json: want pending 1, delayed 1, got %+v", d.queue, q)
		}
		var all []queueJSON
		d.json(&all, "stats")
		if !slices.ContainsFunc(all, func(x queueJSON) bool { return x == q }) {
			t.Errorf("stats -o json (every queue): want %+v among %+v", q, all)
		}
		d.fails(1, []string{`unknown queue "nosuch"`, d.queue}, "stats", "nosuch")
	})
}

func TestList(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.worker(map[string]any{"fail": failing})
		bad := d.send("fail", 0)
		d.archived(bad)
		later := d.send("add", time.Hour, 1, 2)

		r := d.ok("ls", "archived", "-q", d.queue)
		got := row(r.stdout, bad)
		if len(got) < 5 || got[1] != "fail" || got[3] != "1" || got[4] != "FAILURE" || !strings.Contains(r.stdout, "boom: the disk is full") {
			t.Errorf("ls archived: want the row of %s: fail, 1 attempt, FAILURE, the error text; got %q in:\n%s", bad, got, r.stdout)
		}
		for _, h := range []string{"ID", "NAME", "ARGS", "ATTEMPT", "STATE", "ARCHIVED", "REASON", "ERROR"} {
			if !strings.Contains(strings.SplitN(r.stdout, "\n", 2)[0], h) {
				t.Errorf("ls archived: header lacks %s:\n%s", h, r.stdout)
			}
		}
		var ts []taskJSON
		d.json(&ts, "ls", "archived", "-q", d.queue)
		if len(ts) != 1 || ts[0].ID != bad || ts[0].List != "archived" || ts[0].Archive == nil || ts[0].Archive.Attempts != 1 ||
			!strings.Contains(ts[0].Archive.Error, "disk is full") || ts[0].State == nil || ts[0].State.State != errand.StateFailure {
			t.Errorf("ls archived -o json: want %s, archived after 1 attempt with its error and state FAILURE, got %+v", bad, ts)
		}

		d.json(&ts, "ls", "scheduled", "-q", d.queue)
		if len(ts) != 1 || ts[0].ID != later || ts[0].At == nil || time.Until(*ts[0].At) < 50*time.Minute || argJSON(ts[0].Args[1]) != "2" {
			t.Errorf("ls scheduled -o json: want %s due in about an hour with args 1, 2, got %+v", later, ts)
		}
		r = d.ok("ls", "scheduled", "-q", d.queue)
		if got := row(r.stdout, later); len(got) < 3 || got[1] != "add" || !strings.Contains(r.stdout, "[1, 2]") || !strings.Contains(r.stdout, "DUE") {
			t.Errorf("ls scheduled: want the row of %s (add [1, 2], a DUE column), got:\n%s", later, r.stdout)
		}

		// Pages: two more scheduled tasks, one per page.
		d.send("add", 2*time.Hour, 3, 4)
		d.send("add", 3*time.Hour, 5, 6)
		d.json(&ts, "ls", "scheduled", "-q", d.queue, "--size", "1", "--page", "2")
		if len(ts) != 1 || argJSON(ts[0].Args[0]) != "3" {
			t.Errorf("ls scheduled --size 1 --page 2: want the second due task (add 3 4), got %+v", ts)
		}
		d.json(&ts, "ls", "pending", "-q", d.queue)
		if len(ts) != 0 {
			t.Errorf("ls pending -o json: want [], got %+v", ts)
		}

		d.fails(2, []string{`unknown state "bogus"`, "archived"}, "ls", "bogus", "-q", d.queue)
		d.fails(2, []string{"--page 0"}, "ls", "pending", "-q", d.queue, "--page", "0")
		d.fails(1, []string{`unknown queue "nosuch"`, d.queue}, "ls", "pending", "-q", "nosuch")
	})
}

func TestShow(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.worker(map[string]any{"fail": failing})
		bad := d.send("fail", 0)
		d.archived(bad)
		later := d.send("add", time.Hour, 7, 8)

		r := d.ok("show", bad) // no -q: found in whichever queue holds it
		for _, want := range [][]string{{"id", bad}, {"queue", d.queue}, {"list", "archived"}, {"name", "fail"}, {"state", "FAILURE"}, {"reason"}, {"error", "boom:"}} {
			if got := row(r.stdout, want[0]); got == nil || (len(want) > 1 && got[1] != want[1]) {
				t.Errorf("show %s: want a line %q, got %q in:\n%s", bad, want, got, r.stdout)
			}
		}
		var ti taskJSON
		d.json(&ti, "show", later, "-q", d.queue)
		if ti.ID != later || ti.List != "scheduled" || ti.Name != "add" || len(ti.Args) != 2 || ti.State == nil || ti.State.State != errand.StatePending {
			t.Errorf("show %s -o json: want the scheduled add(7, 8), PENDING, got %+v", later, ti)
		}
		d.fails(1, []string{`task "no-such-id" not found`}, "show", "no-such-id")
		d.fails(1, []string{`task "no-such-id" not found`, d.queue}, "show", "no-such-id", "-q", d.queue)
		d.fails(1, []string{`unknown queue "nosuch"`}, "show", bad, "-q", "nosuch")
		d.fails(2, []string{"want one task ID"}, "show")
	})
}

func TestRequeue(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		var fixed atomic.Bool
		flaky := func() (string, error) {
			if !fixed.Load() {
				return "", errand.Permanent(errors.New("the service is down"))
			}
			return "fine now", nil
		}
		d.worker(map[string]any{"flaky": flaky, "other": flaky})
		a, b, c := d.send("flaky", 0), d.send("flaky", 0), d.send("other", 0)
		d.archived(a, b, c)
		fixed.Store(true)

		// By ID: the task runs again and succeeds; the archive lets it go.
		r := d.ok("requeue", a, "-q", d.queue)
		if !strings.Contains(r.stdout, "requeued 1 archived tasks") {
			t.Errorf("requeue %s: want a count of 1, got:\n%s", a, r)
		}
		if st := d.state(a, errand.StateSuccess); len(st.Results) != 1 || string(st.Results[0].Value) != `"fine now"` {
			t.Errorf("requeued task %s: want the result \"fine now\", got %+v", a, st.Results)
		}
		// By name: only "other".
		var out struct {
			Count int `json:"count"`
		}
		d.json(&out, "requeue", "--name", "other", "-q", d.queue)
		if out.Count != 1 {
			t.Errorf("requeue --name other -o json: want count 1, got %+v", out)
		}
		d.state(c, errand.StateSuccess)
		if got := d.list(errand.ListArchived); !slices.Equal(got, []string{b}) {
			t.Errorf("after requeueing %s and the task named other: want only %s archived, got %v", a, b, got)
		}
		// Everything left.
		d.json(&out, "requeue", "--all", "-q", d.queue)
		if out.Count != 1 {
			t.Errorf("requeue --all -o json: want count 1, got %+v", out)
		}
		d.state(b, errand.StateSuccess)
		if got := d.list(errand.ListArchived); len(got) != 0 {
			t.Errorf("after requeue --all: want an empty archive, got %v", got)
		}

		// A task that is not archived, and one nobody knows.
		later := d.send("flaky", time.Hour)
		d.fails(1, []string{fmt.Sprintf("task %q is not in the archive of queue %q", later, d.queue), "scheduled"}, "requeue", later, "-q", d.queue)
		d.fails(1, []string{fmt.Sprintf("task %q is not in the archive", a), "it is completed"}, "requeue", a, "-q", d.queue)
		d.fails(1, []string{`task "no-such-id" not found`}, "requeue", "no-such-id", "-q", d.queue)
		d.fails(1, []string{`unknown queue "nosuch"`}, "requeue", "--all", "-q", "nosuch")
		d.fails(2, []string{"exactly one"}, "requeue", a, "--all", "-q", d.queue)
		d.fails(2, []string{"exactly one"}, "requeue", "-q", d.queue)
	})
}

func TestDelete(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.worker(map[string]any{"fail": failing})
		a, b := d.send("fail", 0), d.send("fail", 0)
		d.archived(a, b)
		r := d.ok("delete", a, "-q", d.queue)
		if !strings.Contains(r.stdout, "deleted "+a) {
			t.Errorf("delete %s: want it named as deleted, got:\n%s", a, r)
		}
		if got := d.list(errand.ListArchived); !slices.Equal(got, []string{b}) {
			t.Errorf("after delete %s: want only %s archived, got %v", a, b, got)
		}
		// The queue stays known however empty it gets (a queue used once
		// answers its counts), so the error is about the task.
		d.fails(1, []string{fmt.Sprintf("task %q is not in the archive", a)}, "delete", a, "-q", d.queue)
		var out struct {
			Count int `json:"count"`
		}
		d.json(&out, "delete", "--all", "-q", d.queue)
		if out.Count != 1 {
			t.Errorf("delete --all -o json: want count 1, got %+v", out)
		}
		if got := d.list(errand.ListArchived); len(got) != 0 {
			t.Errorf("after delete --all: want an empty archive, got %v", got)
		}
	})
}

func TestPurge(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		for i := range 3 {
			d.send("add", 0, i, i)
		}
		d.send("add", time.Hour, 9, 9)
		d.fails(2, []string{"would drop 4 tasks", "3 pending", "1 scheduled", "--yes"}, "purge", "-q", d.queue)
		if n := len(d.list(errand.ListPending)); n != 3 {
			t.Fatalf("purge without --yes dropped tasks: want 3 pending still, got %d", n)
		}
		r := d.ok("purge", "-q", d.queue, "--yes")
		if !strings.Contains(r.stdout, "dropped 4") {
			t.Errorf("purge --yes: want dropped 4, got:\n%s", r)
		}
		if p, s := d.list(errand.ListPending), d.list(errand.ListScheduled); len(p)+len(s) != 0 {
			t.Errorf("after purge --yes: want no pending or scheduled task, got %v and %v", p, s)
		}
		d.send("add", 0, 1, 1)
		var out struct {
			Purged int `json:"purged"`
		}
		d.json(&out, "purge", "-f", "-q", d.queue)
		if out.Purged != 1 {
			t.Errorf("purge -f -o json: want purged 1, got %+v", out)
		}
		d.fails(1, []string{`unknown queue "nosuch"`}, "purge", "-q", "nosuch", "--yes")
	})
}

func TestPauseResume(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.send("add", time.Hour, 1, 1) // the queue exists
		r := d.ok("pause", d.queue)
		if !strings.Contains(r.stdout, "paused queue") {
			t.Errorf("pause: want it to say so, got:\n%s", r)
		}
		if ps, err := d.srv.Paused(context.Background()); err != nil || !slices.Contains(ps, d.queue) {
			t.Fatalf("after pause %s: want Paused to list it, got %v, %v", d.queue, ps, err)
		}
		var qs []queueJSON
		d.json(&qs, "queues")
		if i := slices.IndexFunc(qs, func(q queueJSON) bool { return q.Name == d.queue }); i < 0 || !qs[i].Paused {
			t.Errorf("queues -o json after pause: want %s paused, got %+v", d.queue, qs)
		}
		if got := row(d.ok("queues").stdout, d.queue); len(got) < 2 || got[1] != "yes" {
			t.Errorf("queues after pause: want PAUSED yes for %s, got %q", d.queue, got)
		}
		// A task sent while paused runs once the queue resumes.
		d.worker(map[string]any{"add": func(a, b int) (int, error) { return a + b, nil }})
		id := d.send("add", 0, 20, 22)
		var out struct {
			Paused bool `json:"paused"`
		}
		d.json(&out, "resume", d.queue)
		if out.Paused {
			t.Errorf("resume -o json: want paused false, got %+v", out)
		}
		if ps, err := d.srv.Paused(context.Background()); err != nil || slices.Contains(ps, d.queue) {
			t.Errorf("after resume %s: want Paused not to list it, got %v, %v", d.queue, ps, err)
		}
		if st := d.state(id, errand.StateSuccess); string(st.Results[0].Value) != "42" {
			t.Errorf("task sent while paused: want 42 after resume, got %+v", st.Results)
		}
		d.fails(1, []string{`unknown queue "nosuch"`, d.queue}, "pause", "nosuch")
		d.fails(2, []string{"want one QUEUE"}, "pause")
	})
}

func TestWorkers(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		w := d.worker(map[string]any{"add": func(a, b int) (int, error) { return a + b, nil }})
		var ws []errand.WorkerInfo
		eventually(t, "the worker's heartbeat", func() bool {
			d.json(&ws, "workers")
			return len(ws) == 1
		})
		if ws[0].ID != w.ID() || !slices.Equal(ws[0].Queues, []string{d.queue}) || ws[0].Concurrency != 4 || ws[0].PID != os.Getpid() {
			t.Errorf("workers -o json: want worker %s of queue %s, concurrency 4, pid %d, got %+v", w.ID(), d.queue, os.Getpid(), ws[0])
		}
		r := d.ok("workers")
		if got := row(r.stdout, w.ID()); len(got) < 5 || got[3] != d.queue || got[4] != "0/4" {
			t.Errorf("workers: want the row of %s (queue %s, busy 0/4), got %q in:\n%s", w.ID(), d.queue, got, r.stdout)
		}
	})
}

func TestEnqueue(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		d.worker(map[string]any{
			"add": func(a, b int) (int, error) { return a + b, nil },
			"greet": func(name string, n float64, tags []string, opts map[string]bool) (string, error) {
				return fmt.Sprint(name, n, tags, opts), nil
			},
		})
		r := d.ok("enqueue", "add", "2", "int:3", "-q", d.queue)
		id := strings.TrimSpace(r.stdout)
		if !regexp.MustCompile(`^[0-9a-f-]{36}$`).MatchString(id) {
			t.Fatalf("enqueue: want the task ID alone on stdout, got:\n%s", r)
		}
		if st := d.state(id, errand.StateSuccess); string(st.Results[0].Value) != "5" {
			t.Errorf("enqueue add 2 int:3: want 5, got %+v", st.Results)
		}
		var out struct{ ID, Name, Queue string }
		d.json(&out, "enqueue", "-q", d.queue, "greet", "hello", "float64:1.5", `[]string:["a","b"]`, `{"x":true}`)
		if out.Name != "greet" || out.Queue != d.queue {
			t.Errorf("enqueue -o json: want name greet on %s, got %+v", d.queue, out)
		}
		if st := d.state(out.ID, errand.StateSuccess); string(st.Results[0].Value) != `"hello1.5 [a b] map[x:true]"` {
			t.Errorf("enqueue greet: want the arguments to arrive as given, got %+v", st.Results)
		}
		d.json(&out, "enqueue", "add", "1", "1", "-q", d.queue, "--delay", "1h")
		if got := d.list(errand.ListScheduled); !slices.Equal(got, []string{out.ID}) {
			t.Errorf("enqueue --delay 1h: want %s scheduled, got %v", out.ID, got)
		}
		d.fails(2, []string{"argument 2", "int"}, "enqueue", "add", "1", "int:x", "-q", d.queue)
		d.fails(2, []string{"NAME"}, "enqueue", "-q", d.queue)
	})
}

func TestParseArg(t *testing.T) {
	for _, c := range []struct{ in, typ, value string }{
		{"3", "", "3"},
		{"int:3", "int", "3"},
		{"hello", "string", `"hello"`},
		{`"quoted"`, "", `"quoted"`},
		{"string:42", "string", `"42"`},
		{"string:a:b", "string", `"a:b"`},
		{"http://x", "string", `"http://x"`},
		{"[]int:[1, 2]", "[]int", "[1,2]"},
		{`json:{"a": 1}`, "", `{"a":1}`},
		{"bool:true", "bool", "true"},
	} {
		a, err := parseArg(c.in)
		if err != nil {
			t.Errorf("parseArg(%q): %v", c.in, err)
			continue
		}
		if v, _ := json.Marshal(a.Value); a.Type != c.typ || string(v) != c.value {
			t.Errorf("parseArg(%q) = type %q value %s, want type %q value %s", c.in, a.Type, v, c.typ, c.value)
		}
	}
	for _, in := range []string{"int:x", "int:3.5", "bool:1", "[]int:[\"a\"]", "json:{", "int:null", "int:3 4"} {
		if a, err := parseArg(in); err == nil {
			t.Errorf("parseArg(%q) = %+v, want an error", in, a)
		}
	}
}

// TestBadInput covers what fails before any server is asked: usage errors
// exit 2, an unreachable server 1, and no secret is ever printed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"unknown command", []string{"frobnicate"}, nil, 2, `unknown command "frobnicate"`},
		{"bad flag", []string{"queues", "--frob"}, nil, 2, "flag provided but not defined: -frob"},
		{"bad output", []string{"queues", "-o", "yaml", "--broker", "memory://"}, nil, 2, `-o "yaml"`},
		{"no broker", []string{"queues"}, nil, 2, "no broker: give --broker URL or set ERRAND_BROKER_URL"},
		{"malformed URL flag", []string{"queues", "--broker", "redis://:" + secret + "@127.0.0.1:notaport/0"}, nil, 2, "malformed driver URL redis://xxxxx"},
		{"malformed URL env", []string{"ls", "archived"}, map[string]string{"ERRAND_BROKER_URL": "redis://:" + secret + "@127.0.0.1:notaport/0"}, 2, "malformed driver URL"},
		{"malformed backend URL", []string{"queues", "--broker", "memory://", "--backend", "mongodb://u:" + secret + "@[::1"}, nil, 2, "malformed driver URL"},
		{"no scheme", []string{"queues", "--broker", "127.0.0.1"}, nil, 2, "no scheme"},
		{"unknown scheme", []string{"queues", "--broker", "nats://u:" + secret + "@host/"}, nil, 2, `no broker registered for scheme "nats"`},
		{"unreachable amqp", []string{"stats", "--broker", "amqp://u:" + secret + "@127.0.0.1:1/?timeout=2s", "--backend", "memory://"}, nil, 1, "connection refused"},
		{"no backend", []string{"queues", "--broker", "sqs://" + secret + ":" + secret + "@localhost:1/"}, nil, 2, "no result backend"},
		{"unreachable", []string{"queues", "--broker", "redis://:" + secret + "@127.0.0.1:1/0?timeout=2s"}, nil, 1, "connection refused"},
		{"help", []string{"help"}, nil, 0, ""},
		{"help command", []string{"help", "requeue"}, nil, 0, ""},
		{"command -h", []string{"purge", "-h"}, nil, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := run(context.Background(), c.args, &out, &errOut, func(k string) string { return c.env[k] })
			r := result{code, out.String(), errOut.String()}
			if code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("errand %s: want exit %d and %q on stderr, got:\n%s", strings.Join(c.args, " "), c.code, c.want, r)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("errand %s printed the URL's password:\n%s", strings.Join(c.args, " "), r)
			}
			if code != 0 && strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
				t.Errorf("errand %s: an error is one line on stderr, got:\n%s", strings.Join(c.args, " "), r.stderr)
			}
			if code == 0 && !strings.HasPrefix(r.stdout, "usage: errand") {
				t.Errorf("errand %s: want the usage on stdout, got:\n%s", strings.Join(c.args, " "), r)
			}
		})
	}
}

// argJSON is an argument's value as JSON text.
func argJSON(a argView) string {
	b, _ := json.Marshal(a.Value)
	return string(b)
}

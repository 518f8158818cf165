package conformance

// The fault scenarios: what used to be hand-written by every driver with a
// server — a worker process killed mid-task, a server restarted mid-chord —
// run by the kit with real processes the driver's test starts and stops.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
)

// ---- a worker process killed mid-task ----

// workerProcessEnv marks a test binary the kit re-ran as a worker process
// of RunWorkerKilled; its value is the JSON of a workerSpec.
const workerProcessEnv = "ERRAND_CONFORMANCE_WORKER_PROCESS"

// workerSpec tells a worker process what to consume and how.
type workerSpec struct {
	Test        string        // the subtest that turns into the worker (its t.Name())
	Queue       string        // the queue the tasks are on
	Dir         string        // where the tasks leave their marks
	Hang        bool          // tasks block until the process dies
	Concurrency int           // the worker's slots
	Lease       time.Duration // the worker's lease
}

// markTask is the task of RunWorkerKilled: it leaves DIR/started-ID, then,
// unless the process is meant to hang, DIR/done-ID.
const markTask = "errand.conformance.mark"

// RunWorkerKilled runs the at-least-once scenario with real processes, as
// the subtest Fault/WorkerKilled: 20 tasks are queued, a worker process
// with 4 slots takes 4 of them and is killed with SIGKILL while they run
// (no ack, no release, no further lease extension), and a second worker
// process must then complete every task, the killed worker's included,
// once their leases (h.Timing.Lease, the workers' lease) run out. The
// first worker has 10×Timing.Prompt to start its tasks; the second has
// 3×Lease + 10×Prompt to complete all of them.
//
// The worker processes are the test binary itself, re-run by the kit with
// -test.run naming this subtest and an environment variable telling
// RunWorkerKilled to become a worker instead of the scenario. So the test
// that calls it needs no TestMain, but everything it does before the call
// runs again in each worker process, and h.New is called there too: it
// must reach the same server from what both processes share (environment
// variables, constants), never from state of the parent process. Task
// completions are observed through files in a temporary directory, so no
// result backend is involved.
func RunWorkerKilled(t *testing.T, h BrokerHarness) {
	h.Timing = h.Timing.withDefaults()
	t.Run("Fault/WorkerKilled", func(t *testing.T) {
		if spec, ok := workerProcessSpec(t); ok {
			becomeWorkerProcess(t, h, spec) // never returns
		}
		guard(t, h.Timing.Watchdog, func() { workerKilled(t, h, execWorker) })
	})
}

// workerProcess is one worker of the scenario: a child process (execWorker)
// or, in the kit's self-test, an in-process stand-in.
type workerProcess interface {
	// exited is closed once the worker has ended, killed or on its own.
	exited() <-chan struct{}
	// kill ends the worker at once: it makes no further call to the broker.
	kill()
	// output is what the worker printed, for failure messages.
	output() string
}

type spawnFunc func(t testing.TB, h BrokerHarness, spec workerSpec) workerProcess

func workerKilled(t testing.TB, h BrokerHarness, spawn spawnFunc) {
	tm := h.Timing
	ctx := caseCtx(t, tm)
	dir := t.TempDir()
	q := name(t, "q")
	producer, err := errand.NewServer(errand.Config{Broker: h.New(t), Backend: memorybackend.New(nil), DefaultQueue: q})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { producer.Backend().Close() })
	const n, slots = 20, 4
	var all []string
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		all = append(all, id)
		if _, err := producer.SendTask(ctx, errand.NewSignature(markTask, id)); err != nil {
			t.Fatalf("SendTask: %v", err)
		}
	}
	spec := workerSpec{Test: t.Name(), Queue: q, Dir: dir, Hang: true, Concurrency: slots, Lease: tm.Lease}

	// The first worker takes `slots` tasks and hangs in them until killed.
	first := spawn(t, h, spec)
	if !waitMarks(ctx, dir, "started-", slots, time.Now().Add(tm.Prompt*10), first) {
		got, _ := marks(dir, "started-")
		t.Fatalf("delivery promise broken: a worker process with %d slots started %d of %d queued tasks within %v; its output:\n%s",
			slots, len(got), n, tm.Prompt*10, first.output())
	}
	first.kill()
	killed, _ := marks(dir, "started-")
	if done, _ := marks(dir, "done-"); len(done) != 0 {
		t.Fatalf("the scenario needs the killed worker's tasks unfinished, but it finished %v", done)
	}
	killedAt := time.Now()

	// A second worker must complete everything, the killed worker's tasks
	// once their leases run out.
	spec.Hang = false
	second := spawn(t, h, spec)
	within := tm.Lease*3 + tm.Prompt*10
	if !waitMarks(ctx, dir, "done-", n, time.Now().Add(within), second) {
		done, _ := marks(dir, "done-")
		var lost, lostKilled []string
		for _, id := range all {
			if !slices.Contains(done, id) {
				lost = append(lost, id)
				if slices.Contains(killed, id) {
					lostKilled = append(lostKilled, id)
				}
			}
		}
		t.Fatalf("at-least-once promise broken: a worker process was killed (SIGKILL) while running %v; %v later a second worker had completed %d of %d tasks (lease %v, %s). Never completed: %v, of them the killed worker's: %v. The second worker's output:\n%s",
			killed, time.Since(killedAt).Round(time.Millisecond), len(done), n, tm.Lease, tm, lost, lostKilled, second.output())
	}
	t.Logf("a worker process killed while running %v; a second worker completed all %d tasks %v later (lease %v)",
		killed, n, time.Since(killedAt).Round(time.Millisecond), tm.Lease)
}

// marks lists the IDs of the marks with prefix in dir.
func marks(dir, prefix string) ([]string, error) {
	es, err := os.ReadDir(dir)
	var ids []string
	for _, e := range es {
		if id, ok := strings.CutPrefix(e.Name(), prefix); ok {
			ids = append(ids, id)
		}
	}
	return ids, err
}

// waitMarks polls dir until it holds n marks with prefix; false when ctx
// ends, by passes or the worker exits first.
func waitMarks(ctx context.Context, dir, prefix string, n int, by time.Time, w workerProcess) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if got, _ := marks(dir, prefix); len(got) >= n {
			return true
		}
		if time.Now().After(by) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.exited():
			got, _ := marks(dir, prefix)
			return len(got) >= n
		case <-tick.C:
		}
	}
}

// startMarkWorker starts the worker of one worker process on drv.
func startMarkWorker(drv errand.Broker, spec workerSpec) (*errand.Worker, error) {
	srv, err := errand.NewServer(errand.Config{Broker: drv, Backend: memorybackend.New(nil), DefaultQueue: spec.Queue})
	if err != nil {
		return nil, err
	}
	mark := func(what, id string) error {
		return os.WriteFile(filepath.Join(spec.Dir, what+"-"+id), nil, 0o644)
	}
	err = srv.Register(markTask, func(ctx context.Context, id string) error {
		if err := mark("started", id); err != nil {
			return err
		}
		if spec.Hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return mark("done", id)
	})
	if err != nil {
		return nil, err
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: spec.Concurrency, Lease: spec.Lease})
	w.Start()
	return w, nil
}

// workerProcessSpec reports whether this process is a worker the kit
// started for the subtest t.
func workerProcessSpec(t *testing.T) (workerSpec, bool) {
	v := os.Getenv(workerProcessEnv)
	if v == "" {
		return workerSpec{}, false
	}
	var spec workerSpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		t.Fatalf("%s: %v", workerProcessEnv, err)
	}
	return spec, spec.Test == t.Name()
}

// becomeWorkerProcess runs the worker until the process is killed, or its
// parent goes away (its stdin, a pipe from the parent, closes).
func becomeWorkerProcess(t *testing.T, h BrokerHarness, spec workerSpec) {
	if _, err := startMarkWorker(h.New(t), spec); err != nil {
		t.Fatalf("worker process: %v", err)
	}
	fmt.Fprintf(os.Stderr, "conformance: worker process %d consuming %s (hang %v)\n", os.Getpid(), spec.Queue, spec.Hang)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// execWorker re-runs the test binary as a worker process.
func execWorker(t testing.TB, h BrokerHarness, spec workerSpec) workerProcess {
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run="+runPattern(spec.Test), "-test.count=1",
		"-test.timeout="+(h.Timing.Watchdog*2).String())
	cmd.Env = append(os.Environ(), workerProcessEnv+"="+string(b))
	p := &childProcess{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	stdin, err := cmd.StdinPipe() // closes when this process dies: the child follows
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a worker process: %v", err)
	}
	go func() {
		cmd.Wait()
		stdin.Close()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// runPattern is a -test.run pattern matching exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

type childProcess struct {
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{}
}

func (p *childProcess) exited() <-chan struct{} { return p.done }
func (p *childProcess) output() string          { return p.out.String() }
func (p *childProcess) kill() {
	p.cmd.Process.Kill() // SIGKILL on Unix: no deferred call, no cleanup runs
	<-p.done
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ---- a server restarted mid-chord ----

// Restarted names the drivers whose server RestartHarness.Stop and Start
// control.
type Restarted uint8

const (
	// RestartsBroker: the broker's server restarts.
	RestartsBroker Restarted = 1 << iota
	// RestartsBackend: the result backend's server restarts.
	RestartsBackend
)

// RestartHarness wires RunServerRestart: the drivers the workers use, and
// how to stop and start the server one (or both) of them live on. The
// server must be the test's own (a private process on a spare port), never
// a shared one.
type RestartHarness struct {
	// Broker and Backend make the drivers of the scenario's server and
	// worker. The one not under test is typically a memory driver
	// (MemoryBroker, MemoryBackend), which a restart does not touch.
	Broker  BrokerHarness
	Backend BackendHarness
	// Restarts says which of the two Stop and Start act on; both
	// (RestartsBroker|RestartsBackend) when they share one server. Each
	// must declare what it promises across a restart: BrokerCaps.Durable,
	// or BackendCaps.Durable or Lossy.
	Restarts Restarted
	// Stop stops the server while tasks run; a graceful stop (SIGTERM) is
	// fine, and so is a kill where that is what the driver promises to
	// survive. It returns once the process has exited.
	Stop func(t testing.TB)
	// Start starts the server again on the same address with the same data
	// directory, and returns once it accepts connections.
	Start func(t testing.TB)
}

// RunServerRestart runs the restart scenario as the subtest
// Fault/ServerRestart: a chord of 8 members and 8 plain tasks are sent to a
// worker with 4 slots; while 4 of them run, the server stops; the running
// tasks finish into the outage (their acks, state writes and group
// completions fail), the server stays down for Timing.Prompt, then starts
// again. What must follow is what the restarted drivers declare:
//
//   - every one Durable: every task and the chord callback complete with
//     their results, as if nothing happened (nothing lost), within
//     4×Lease + 10×Prompt of the restart;
//   - a Lossy backend: every result handle returns within that bound,
//     either the right result or an error (results and group counters may
//     be lost, but a waiter is told, never left hanging, and never handed a
//     wrong value); a chord callback that runs gets every member's result.
//
// A restarted driver declaring neither fails the scenario: it has no
// promise to check.
func RunServerRestart(t *testing.T, h RestartHarness) {
	h.Broker.Timing = h.Broker.Timing.withDefaults()
	h.Backend.Timing = h.Backend.Timing.withDefaults()
	t.Run("Fault/ServerRestart", func(t *testing.T) {
		guard(t, max(h.Broker.Timing.Watchdog, h.Backend.Timing.Watchdog), func() { serverRestart(t, h) })
	})
}

// resultHandle is an AsyncResult or a ChordAsyncResult.
type resultHandle interface {
	GetInto(ctx context.Context, dst ...any) error
}

// restartPromise is what the restarted drivers declare: "durable" or
// "lossy", and a description naming them.
func restartPromise(h RestartHarness) (mode, who string, err error) {
	if h.Restarts&(RestartsBroker|RestartsBackend) == 0 || h.Stop == nil || h.Start == nil {
		return "", "", errors.New("RestartHarness needs Restarts (RestartsBroker, RestartsBackend or both), Stop and Start")
	}
	mode = "durable"
	var whos []string
	if h.Restarts&RestartsBroker != 0 {
		if !h.Broker.Caps.Durable {
			return "", "", errors.New("the restarted broker does not declare BrokerCaps.Durable: RunServerRestart has no promise to check (a broker that loses its queue on a restart leaves waiters hanging, which no test can tell from slowness)")
		}
		whos = append(whos, "broker (Durable)")
	}
	if h.Restarts&RestartsBackend != 0 {
		switch c := h.Backend.Caps; {
		case c.Durable && c.Lossy:
			return "", "", errors.New("the restarted backend declares both Durable and Lossy")
		case c.Durable:
			whos = append(whos, "backend (Durable)")
		case c.Lossy:
			mode = "lossy"
			whos = append(whos, "backend (Lossy)")
		default:
			return "", "", errors.New("the restarted backend declares neither BackendCaps.Durable nor Lossy: RunServerRestart has no promise to check")
		}
	}
	return mode, "the restarted " + strings.Join(whos, " and "), nil
}

func serverRestart(t testing.TB, h RestartHarness) {
	mode, who, err := restartPromise(h)
	if err != nil {
		t.Fatalf("restart harness: %v", err)
	}
	lease := h.Broker.Timing.Lease
	prompt := max(h.Broker.Timing.Prompt, h.Backend.Timing.Prompt)
	ctx := caseCtx(t, Timing{Watchdog: max(h.Broker.Timing.Watchdog, h.Backend.Timing.Watchdog)})
	srv, err := errand.NewServer(errand.Config{Broker: h.Broker.New(t), Backend: h.Backend.New(t, 0), DefaultQueue: name(t, "q")})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}

	// Every task blocks on gate the first time round; the first `slots`
	// starts close running.
	const slots, members, plain = 4, 8, 8
	gate, running := make(chan struct{}), make(chan struct{})
	var starts atomic.Int32
	hold := func(ctx context.Context) error {
		if starts.Add(1) == slots {
			close(running)
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var mu sync.Mutex
	var callbackArgs [][]int
	reg := func(name string, fn any) {
		if err := srv.Register(name, fn); err != nil {
			t.Fatalf("Register(%s): %v", name, err)
		}
	}
	reg("errand.conformance.square", func(ctx context.Context, i int) (int, error) { return i * i, hold(ctx) })
	reg("errand.conformance.double", func(ctx context.Context, i int) (int, error) { return 2 * i, hold(ctx) })
	reg("errand.conformance.sum", func(xs ...int) (int, error) {
		mu.Lock()
		callbackArgs = append(callbackArgs, xs)
		mu.Unlock()
		total := 0
		for _, x := range xs {
			total += x
		}
		return total, nil
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: slots, Lease: lease, ErrorBackoff: prompt / 10, CallTimeout: prompt})
	w.Start()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), prompt*5)
		defer cancel()
		w.Shutdown(sctx) // after a fault, tasks may still be in flight: not the case's verdict
	})

	var sigs []*errand.Signature
	wantSum := 0
	for i := range members {
		sigs = append(sigs, errand.NewSignature("errand.conformance.square", i))
		wantSum += i * i
	}
	g, _ := errand.NewGroup(sigs...)
	ch, _ := errand.NewChord(g, errand.NewSignature("errand.conformance.sum"))
	chord, err := srv.SendChord(ctx, ch, errand.SendConcurrency(2))
	if err != nil {
		t.Fatalf("SendChord: %v", err)
	}
	var tasks []*errand.AsyncResult
	for i := range plain {
		r, err := srv.SendTask(ctx, errand.NewSignature("errand.conformance.double", i))
		if err != nil {
			t.Fatalf("SendTask: %v", err)
		}
		tasks = append(tasks, r)
	}
	startBy := time.NewTimer(prompt * 10)
	defer startBy.Stop()
	select {
	case <-running:
	case <-startBy.C:
		t.Fatalf("delivery promise broken: %d tasks were queued for a worker with %d slots; %d started within %v", members+plain, slots, starts.Load(), prompt*10)
	}

	h.Stop(t)
	close(gate) // the running tasks finish into the outage
	sleepUntil(ctx, time.Now().Add(prompt))
	h.Start(t)
	restarted := time.Now()
	settle := lease*4 + prompt*10
	vctx, cancel := context.WithDeadline(ctx, restarted.Add(settle))
	defer cancel()

	// The verdict: every result awaited at once (one that hangs must not
	// look like the others hanging), then one message per broken promise.
	var vmu sync.Mutex
	var wg sync.WaitGroup
	var wrong, hung, lost, told []string
	check := func(what string, r resultHandle, want int) {
		var got int
		err := r.GetInto(vctx, &got)
		vmu.Lock()
		defer vmu.Unlock()
		switch {
		case err == nil && got == want:
		case err == nil:
			wrong = append(wrong, fmt.Sprintf("%s returned %d, want %d", what, got, want))
		case mode == "lossy" && vctx.Err() != nil:
			hung = append(hung, what)
		case mode == "lossy":
			told = append(told, fmt.Sprintf("%s: %v", what, err))
		default:
			lost = append(lost, fmt.Sprintf("%s ended with %v, want %d", what, err, want))
		}
	}
	wg.Go(func() { check("the chord", chord, wantSum) })
	for i, r := range tasks {
		wg.Go(func() { check(fmt.Sprintf("task %d", i), r, 2*i) })
	}
	wg.Wait()
	slices.Sort(wrong)
	slices.Sort(hung)
	slices.Sort(lost)
	slices.Sort(told)
	if len(wrong) > 0 {
		t.Errorf("results promise broken: across a restart of %s, %s: a lost result must be an error, never a wrong value", who, strings.Join(wrong, "; "))
	}
	if len(hung) > 0 {
		t.Errorf("lossy promise broken: %s stopped and started mid-chord; %v neither returned a result nor an error within %v of the restart: a Lossy backend may lose results and group counters but must say so, never leave a waiter hanging", who, hung, settle)
	}
	if len(lost) > 0 {
		t.Errorf("durability promise broken: %s stopped and started mid-chord; within %v of the restart %s: a Durable driver loses nothing across a restart (what was sent before it, queued or running, completes)", who, settle, strings.Join(lost, "; "))
	}
	for _, l := range told {
		t.Logf("lost, and said so: %s", l)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, xs := range callbackArgs {
		if len(xs) != members {
			t.Errorf("workflows promise broken: across a restart of %s the chord callback ran with %d member results %v, want all %d: a callback runs with every member's result or not at all", who, len(xs), xs, members)
		}
	}
	t.Logf("%s; the chord callback ran %d time(s); verdict within %v of the restart (lease %v, prompt %v)", who, len(callbackArgs), time.Since(restarted).Round(time.Millisecond), lease, prompt)
}

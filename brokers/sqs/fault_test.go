package sqsbroker_test

// A worker process SIGKILLed mid-task: every task completes after the
// visibility timeout, none lost.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
)

// The test binary doubles as the worker process: with ERRAND_FAULT_QUEUE set
// it runs a worker until killed. Each task creates DIR/started-ID, then
// (unless hanging) DIR/done-ID.
func TestMain(m *testing.M) {
	if q := os.Getenv("ERRAND_FAULT_QUEUE"); q != "" {
		os.Exit(faultWorker(q, os.Getenv("ERRAND_FAULT_DIR"), os.Getenv("ERRAND_FAULT_HANG") == "1"))
	}
	os.Exit(m.Run())
}

func faultWorker(q, dir string, hang bool) int {
	c := newClient(os.Getenv("ERRAND_SQS_ENDPOINT"))
	srv, _ := errand.NewServer(errand.Config{Broker: sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: "errand-test-"}),
		Backend: memorybackend.New(nil), DefaultQueue: q})
	srv.Register("mark", func(ctx context.Context, id string) error {
		os.WriteFile(filepath.Join(dir, "started-"+id), nil, 0o644)
		if hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return os.WriteFile(filepath.Join(dir, "done-"+id), nil, 0o644)
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, Lease: 2 * time.Second})
	w.Run(context.Background()) // until killed
	return 0
}

func count(dir, prefix string) int {
	m, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	return len(m)
}

func waitFiles(t *testing.T, dir, prefix string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if count(dir, prefix) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("at-least-once promise broken: %d of %d %s marks after %v", count(dir, prefix), n, prefix, within)
		}
	}
}

func TestWorkerKilledMidTask(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	q := "fault-" + errand.NewUUID()[:8]
	dir := t.TempDir()
	producer, _ := errand.NewServer(errand.Config{Broker: sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: "errand-test-"}),
		Backend: conformance.MemoryBackend().New(t, 0), DefaultQueue: q})
	const n = 20
	for i := range n {
		if _, err := producer.SendTask(ctx, errand.NewSignature("mark", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	worker := func(hang bool) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "ERRAND_FAULT_QUEUE="+q, "ERRAND_FAULT_DIR="+dir)
		if hang {
			cmd.Env = append(cmd.Env, "ERRAND_FAULT_HANG=1")
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	a := worker(true)
	waitFiles(t, dir, "started-", 4, 30*time.Second)
	a.Process.Signal(syscall.SIGKILL)
	a.Wait()
	if d := count(dir, "done-"); d != 0 {
		t.Fatalf("the hanging worker finished %d tasks; the test needs them unfinished", d)
	}
	b := worker(false)
	defer func() { b.Process.Kill(); b.Wait() }()
	waitFiles(t, dir, "done-", n, 60*time.Second)
}

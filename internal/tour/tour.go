// Package tour is errand's tour: one worker on the in-memory broker and
// backend runs a task, a task that fails twice and succeeds on retry, a
// delayed task, a chain, a group and a chord of 100 tasks, and the tour
// prints each result. Two commands run it and print the same tour:
// cmd/demo in the root module (go run ./cmd/demo, which builds in seconds
// because it links no third-party code) and the operator CLI's errand demo
// (cmd/errand, for installed binaries).
//
// It uses the standard library, package errand and the memory drivers
// only; keep it so, or the first command of the README slows down.
package tour

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// Run runs the tour on fresh in-memory drivers, printing a header, one line
// per step and a summary to out. It returns nil only if every step's result
// is right, and an error naming how many steps failed otherwise; a step that
// fails does not stop the later ones. The whole tour is bounded by one
// minute on top of ctx; it usually takes about a second. Run starts and
// shuts down its own worker and closes its drivers before it returns.
func Run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	broker, backend := memorybroker.New(nil), memorybackend.New(nil)
	defer broker.Close()
	defer backend.Close()
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend})
	if err != nil {
		return err
	}
	var flakyRuns atomic.Int32
	tasks := map[string]any{
		"add":    func(a, b int) (int, error) { return a + b, nil },
		"mul":    func(a, b int) (int, error) { return a * b, nil },
		"square": func(x int) (int, error) { return x * x, nil },
		"flaky": func(ctx context.Context) (string, error) {
			flakyRuns.Add(1)
			ti, _ := errand.TaskInfoFrom(ctx)
			if ti.Attempt < 3 {
				return "", fmt.Errorf("simulated outage on attempt %d", ti.Attempt)
			}
			return fmt.Sprintf("succeeded on attempt %d", ti.Attempt), nil
		},
		"stamp": func() (time.Time, error) { return time.Now(), nil },
		"sum": func(xs ...int) (int, error) {
			t := 0
			for _, x := range xs {
				t += x
			}
			return t, nil
		},
	}
	if err := srv.RegisterTasks(tasks); err != nil {
		return err
	}
	w := srv.NewWorker(errand.WorkerConfig{
		Concurrency: 8,
		// Retries wait 1, 2, 3, 5... units; a tenth of a second keeps the tour short.
		RetryPolicy: errand.Fibonacci{Unit: 100 * time.Millisecond},
	})
	w.Start()
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		w.Shutdown(sctx)
	}()

	fmt.Fprintln(out, "errand demo — in-memory broker and backend, one worker with 8 slots")
	fmt.Fprintln(out)
	steps := []struct {
		name string
		run  func() (string, error)
	}{
		{"task", func() (string, error) {
			r, err := srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
			if err != nil {
				return "", err
			}
			var n int
			if err := r.GetInto(ctx, &n); err != nil {
				return "", err
			}
			return fmt.Sprintf("add(2, 3) = %d", n), expect(n == 5, "want 5")
		}},
		{"retry", func() (string, error) {
			sig := errand.NewSignature("flaky")
			sig.RetryCount = 3
			r, err := srv.SendTask(ctx, sig)
			if err != nil {
				return "", err
			}
			var s string
			if err := r.GetInto(ctx, &s); err != nil {
				return "", err
			}
			return fmt.Sprintf("flaky failed twice, then %s (%d runs)", s, flakyRuns.Load()), expect(flakyRuns.Load() == 3, "want 3 runs")
		}},
		{"delay", func() (string, error) {
			eta := time.Now().Add(500 * time.Millisecond)
			sig := errand.NewSignature("stamp")
			sig.ETA = &eta
			r, err := srv.SendTask(ctx, sig)
			if err != nil {
				return "", err
			}
			var ran time.Time
			if err := r.GetInto(ctx, &ran); err != nil {
				return "", err
			}
			late := ran.Sub(eta)
			return fmt.Sprintf("due in 500ms, ran %s after its ETA", late.Round(10*time.Microsecond)), expect(late >= 0, "ran before its ETA")
		}},
		{"chain", func() (string, error) {
			c, _ := errand.NewChain(errand.NewSignature("add", 1, 2), errand.NewSignature("mul", 10), errand.NewSignature("add", 5))
			r, err := srv.SendChain(ctx, c)
			if err != nil {
				return "", err
			}
			var n int
			if err := r.GetInto(ctx, &n); err != nil {
				return "", err
			}
			return fmt.Sprintf("add(1, 2) → mul(10, ·) → add(5, ·) = %d", n), expect(n == 35, "want 35")
		}},
		{"group", func() (string, error) {
			var sigs []*errand.Signature
			for i := 1; i <= 10; i++ {
				sigs = append(sigs, errand.NewSignature("mul", i, i))
			}
			g, _ := errand.NewGroup(sigs...)
			rs, err := srv.SendGroup(ctx, g, errand.SendConcurrency(4))
			if err != nil {
				return "", err
			}
			got := make([]int, len(rs))
			for i, r := range rs {
				if err := r.GetInto(ctx, &got[i]); err != nil {
					return "", err
				}
				if got[i] != (i+1)*(i+1) {
					return "", fmt.Errorf("member %d = %d, want %d", i, got[i], (i+1)*(i+1))
				}
			}
			return fmt.Sprintf("10 tasks in parallel: %v", got), nil
		}},
		{"chord", func() (string, error) {
			const n = 100
			var sigs []*errand.Signature
			for i := 1; i <= n; i++ {
				sigs = append(sigs, errand.NewSignature("square", i))
			}
			g, _ := errand.NewGroup(sigs...)
			c, _ := errand.NewChord(g, errand.NewSignature("sum"))
			r, err := srv.SendChord(ctx, c, errand.SendConcurrency(4))
			if err != nil {
				return "", err
			}
			var total int
			if err := r.GetInto(ctx, &total); err != nil {
				return "", err
			}
			want := n * (n + 1) * (2*n + 1) / 6
			return fmt.Sprintf("%d squares, callback sum = %d", n, total), expect(total == want, fmt.Sprintf("want %d", want))
		}},
	}
	start := time.Now()
	failed := 0
	for i, s := range steps {
		fmt.Fprintf(out, "[%d/%d] %-6s ", i+1, len(steps), s.name)
		t0 := time.Now()
		msg, err := s.run()
		mark := "ok  "
		if err != nil {
			mark, failed = "FAIL", failed+1
			msg = fmt.Sprintf("%s — %v", msg, err)
		}
		fmt.Fprintf(out, "%s %s (%s)\n", mark, msg, time.Since(t0).Round(time.Millisecond))
	}
	fmt.Fprintf(out, "\n%d of %d steps passed in %s\n", len(steps)-failed, len(steps), time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return fmt.Errorf("%d steps failed", failed)
	}
	return nil
}

func expect(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}

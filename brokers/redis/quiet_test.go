//go:build linux

package redisbroker_test

// Issue 13, item 4: quiet by default. go-redis prints its connection
// errors to stderr through a process-wide logger (about 70 lines per
// worker while Redis is down for 2s); the Redis drivers replace it with a
// forwarder to Options.Logger, which discards by default. The test
// captures file descriptor 2 itself: go-redis's default logger kept the
// *os.File it found in os.Stderr at init, so reassigning os.Stderr would
// not catch it.
//
// Not parallel: the capture takes the whole process's stderr, and go-redis's
// logger is the whole process's too.

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// captureStderr points file descriptor 2 (and os.Stderr, which is fd 2) at
// a pipe until the returned function is called; that function restores it
// and returns every byte written meanwhile.
func captureStderr(t *testing.T) func() []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&buf, r); close(copied) }()
	var once sync.Once
	restore := func() []byte {
		once.Do(func() {
			syscall.Dup3(saved, 2, 0)
			syscall.Close(saved)
			w.Close()
			<-copied
			r.Close()
		})
		return buf.Bytes()
	}
	t.Cleanup(func() { restore() })
	return restore
}

// recorder is a slog.Handler keeping the records it is given while on.
type recorder struct {
	on      atomic.Bool
	mu      sync.Mutex
	records []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return h.on.Load() }
func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recorder) WithGroup(string) slog.Handler      { return h }

// goRedisLines returns the go-redis records the handler was given.
func (h *recorder) goRedisLines() (lines []string, wrong []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		component := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "component" {
				component = a.Value.String()
			}
			return true
		})
		if component != "go-redis" || r.Level != slog.LevelWarn {
			wrong = append(wrong, r.Level.String()+" "+r.Message+" component="+component)
			continue
		}
		lines = append(lines, r.Message)
	}
	return lines, wrong
}

// outage runs a worker on a private redis-server, kills the server for
// 2s, starts it again and waits for the worker to run a task sent after
// the restart. logger is the broker's Options.Logger.
func outage(t *testing.T, logger *slog.Logger) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, server := redistest.PrivateServer(t)

	rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	be := memorybackend.New(nil)
	t.Cleanup(func() { be.Close() })
	srv, err := errand.NewServer(errand.Config{ // default Logger
		Broker:       redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-quiet", Logger: logger}),
		Backend:      be,
		DefaultQueue: "quiet-" + rand.Text(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 10)
	srv.Register("work", func(ctx context.Context) error { ran <- struct{}{}; return nil })
	fetchFailed := make(chan struct{}, 1)
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2, ErrorHandler: func(error) {
		select {
		case fetchFailed <- struct{}{}:
		default:
		}
	}})
	w.Start()
	defer func() {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		if err := w.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	send := func(when string) {
		if _, err := srv.SendTask(ctx, errand.NewSignature("work")); err != nil {
			t.Fatalf("send %s: %v", when, err)
		}
		select {
		case <-ran:
		case <-ctx.Done():
			t.Fatalf("the worker did not run a task sent %s", when)
		}
	}
	send("before the outage")

	stderr := captureStderr(t)
	server.Kill(t)
	select {
	case <-fetchFailed: // the worker has met the outage
	case <-ctx.Done():
		t.Fatal("the worker never reported a failed fetch while Redis was down")
	}
	<-time.After(2 * time.Second) // the outage's length is the scenario, not a wait for an event
	server.Start(t)
	send("after the restart")
	return stderr()
}

// TestQuietByDefault: a 2s Redis outage under a worker with the default
// loggers writes nothing to stderr.
func TestQuietByDefault(t *testing.T) {
	if out := outage(t, nil); len(out) > 0 {
		t.Fatalf("quiet-by-default promise broken: a 2s Redis outage under a worker with the default loggers wrote %d bytes to stderr (go-redis's logger must be routed into Options.Logger, which discards by default):\n%s", len(out), out)
	}
}

// TestGoRedisLinesToLogger: with Options.Logger set, go-redis's lines
// arrive there (Warn, component=go-redis), and still nothing on stderr.
func TestGoRedisLinesToLogger(t *testing.T) {
	h := &recorder{}
	h.on.Store(true)
	// go-redis's logger is process-wide: turn this one off when done.
	t.Cleanup(func() { h.on.Store(false) })
	out := outage(t, slog.New(h))
	if len(out) > 0 {
		t.Errorf("with Options.Logger set, go-redis's lines belong in it, yet %d bytes reached stderr:\n%s", len(out), out)
	}
	lines, wrong := h.goRedisLines()
	if len(lines) == 0 {
		t.Errorf("Options.Logger promise broken: a 2s Redis outage sent no go-redis line to the broker's Options.Logger (want Warn records with component=go-redis)")
	}
	if len(wrong) > 0 {
		t.Errorf("Options.Logger got records other than Warn with component=go-redis: %q", wrong)
	}
	t.Logf("%d go-redis lines, e.g. %q", len(lines), lines[:min(len(lines), 1)])
}

package conformance

import (
	"context"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ServerProcess is a private server a driver's test runs as a child process
// on a spare port, for RunServerRestart: its Stop and Start methods are a
// RestartHarness's. Never point one at a shared server.
type ServerProcess struct {
	// StopSignal is the signal Stop sends (nil: SIGTERM). PostgreSQL's
	// fast shutdown is SIGINT: its SIGTERM waits for every client to leave.
	StopSignal os.Signal

	cmd   func() *exec.Cmd
	ready func(ctx context.Context) error

	mu   sync.Mutex
	run  *exec.Cmd
	done chan struct{}
	out  lockedBuffer
}

// StartServerProcess starts the server that cmd describes and returns once
// ready reports nil; the process is killed when the test ends. cmd is
// called afresh on each start and must describe the same server each time
// (same address, same data directory); ready is typically the driver
// client's ping, and is retried every 20ms for up to 30s (scaled by
// ERRAND_CONFORMANCE_TIMEOUT_SCALE).
func StartServerProcess(t testing.TB, cmd func() *exec.Cmd, ready func(ctx context.Context) error) *ServerProcess {
	t.Helper()
	p := &ServerProcess{cmd: cmd, ready: ready}
	t.Cleanup(func() {
		p.mu.Lock()
		run, done := p.run, p.done
		p.mu.Unlock()
		if run != nil {
			run.Process.Kill()
			<-done
		}
	})
	p.Start(t)
	return p
}

// Start starts the server again and returns once it is ready.
func (p *ServerProcess) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	if p.run != nil {
		p.mu.Unlock()
		t.Fatalf("server process: Start while it runs")
	}
	c := p.cmd()
	c.Stdout, c.Stderr = &p.out, &p.out
	if err := c.Start(); err != nil {
		p.mu.Unlock()
		t.Fatalf("server process %s: %v", c.Path, err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	p.run, p.done = c, done
	p.mu.Unlock()

	limit := time.Duration(float64(30*time.Second) * scale())
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := p.ready(pctx)
		pcancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("server process %s exited before it was ready (%v); its output:\n%s", c.Path, err, p.out.String())
		case <-ctx.Done():
			t.Fatalf("server process %s not ready within %v: %v; its output:\n%s", c.Path, limit, err, p.out.String())
		case <-tick.C:
		}
	}
}

// Stop asks the server to stop (SIGTERM or StopSignal, so it flushes what it persists)
// and returns once it has exited; a server still running after 10s is
// killed.
func (p *ServerProcess) Stop(t testing.TB) {
	p.stop(t, false)
}

// Kill stops the server with SIGKILL: nothing it had not yet persisted
// survives.
func (p *ServerProcess) Kill(t testing.TB) {
	p.stop(t, true)
}

func (p *ServerProcess) stop(t testing.TB, kill bool) {
	t.Helper()
	p.mu.Lock()
	run, done := p.run, p.done
	p.run = nil
	p.mu.Unlock()
	if run == nil {
		t.Fatalf("server process: Stop while it is stopped")
	}
	sig := p.StopSignal
	if sig == nil {
		sig = syscall.SIGTERM
	}
	if kill || run.Process.Signal(sig) != nil {
		run.Process.Kill()
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		run.Process.Kill()
		<-done
	}
}

// FreeAddr returns a 127.0.0.1 address with a port free a moment ago, for
// a ServerProcess to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

package errand

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
	"github.com/errand-go/errand/internal/uuid"
)

// Live workers: each worker on a broker that keeps a registry
// (driver.Heartbeater) beats every WorkerConfig.Heartbeat with what it is
// running, and leaves the registry when it shuts down.

// runningTasks are the tasks a worker is running, for its heartbeat.
type runningTasks struct {
	mu sync.Mutex
	m  map[string]RunningTask
}

func (r *runningTasks) add(sig *Signature, queue string) {
	r.mu.Lock()
	r.m[sig.UUID] = RunningTask{UUID: sig.UUID, Name: sig.Name, Queue: queue, StartedAt: time.Now().UTC()}
	r.mu.Unlock()
}

func (r *runningTasks) remove(sig *Signature) {
	r.mu.Lock()
	delete(r.m, sig.UUID)
	r.mu.Unlock()
}

func (r *runningTasks) list() []RunningTask {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RunningTask, 0, len(r.m))
	for _, t := range r.m {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b RunningTask) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// newWorkerID returns an ID unique across hosts and processes:
// host:pid:random.
func newWorkerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), strings.ReplaceAll(uuid.New(), "-", "")[:8])
}

// heartbeatParams are what a heartbeater needs of its worker.
type heartbeatParams struct {
	broker *portable.Broker
	hb     driver.Heartbeater
	info   WorkerInfo    // ID, Queues, Concurrency: the rest is filled in
	every  time.Duration // WorkerConfig.Heartbeat
	// stopping is done once the worker stops fetching (a beat failing then
	// is not reported); calls once every call is cancelled (Shutdown gave
	// up on a silent server: the heartbeater returns at once).
	stopping, calls context.Context
	call            func() (context.Context, context.CancelFunc)
	report          func(err error, msg string, attrs ...any)
	log             *slog.Logger
}

// heartbeater reports a worker to the broker's registry of live workers
// (driver.Heartbeater) every WorkerConfig.Heartbeat, with the tasks it is
// running, until the worker has drained; then it removes the worker's
// entry. It owns one goroutine, from start until wait returns.
type heartbeater struct {
	heartbeatParams
	running   runningTasks
	drained   chan struct{}
	drainOnce sync.Once
	wg        sync.WaitGroup
}

func newHeartbeater(p heartbeatParams) *heartbeater {
	return &heartbeater{heartbeatParams: p, running: runningTasks{m: map[string]RunningTask{}}, drained: make(chan struct{})}
}

// add records sig as running on queue. A nil heartbeater does nothing.
func (h *heartbeater) add(sig *Signature, queue string) {
	if h != nil {
		h.running.add(sig, queue)
	}
}

// remove records that sig no longer runs.
func (h *heartbeater) remove(sig *Signature) {
	if h != nil {
		h.running.remove(sig)
	}
}

// start begins beating, at once, unless the worker is already stopping (a
// worker shut down before its first beat has nothing to show or remove).
func (h *heartbeater) start() {
	if h == nil || h.stopping.Err() != nil {
		return
	}
	h.wg.Go(h.run)
}

// drain says the worker has drained (fetching stopped and every task
// returned): the heartbeater removes the worker's entry and returns.
func (h *heartbeater) drain() {
	if h != nil {
		h.drainOnce.Do(func() { close(h.drained) })
	}
}

// wait returns once the heartbeater's goroutine has returned.
func (h *heartbeater) wait() {
	if h != nil {
		h.wg.Wait()
	}
}

// run beats until the worker has drained, with the tasks still running,
// so that during a graceful shutdown the registry shows the worker until
// its last task is done; then it removes the worker's entry. Once the
// settle grace after a Shutdown that gave up is over (every call
// cancelled) it stops at once, leaving the entry to expire.
func (h *heartbeater) run() {
	info := h.info
	info.Host, _ = os.Hostname()
	info.PID, info.StartedAt = os.Getpid(), time.Now().UTC()
	ttl := 3 * h.every
	failing := false
	beat := func() {
		info.Running, info.BeatAt = h.running.list(), time.Now().UTC()
		data, err := json.Marshal(info)
		if err != nil {
			h.report(err, "errand: encode heartbeat")
			return
		}
		ctx, cancel := h.call()
		defer cancel()
		if err = h.broker.Before(ctx); err == nil {
			err = h.broker.After(ctx, h.hb.Beat(ctx, info.ID, data, ttl))
		}
		switch {
		case err != nil && !failing && h.stopping.Err() == nil:
			failing = true
			h.report(err, "errand: heartbeat", "worker", info.ID)
		case err == nil:
			failing = false
		}
	}
	beat()
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			beat()
		case <-h.calls.Done():
			return // Shutdown gave up: no call can be made; the entry expires
		case <-h.drained:
			ctx, cancel := h.call()
			defer cancel()
			if err := h.broker.Before(ctx); err == nil {
				if err := h.hb.Unbeat(ctx, info.ID); err != nil {
					h.log.Warn("errand: remove heartbeat on shutdown", "worker", info.ID, "err", h.broker.After(ctx, err))
				}
			}
			return
		}
	}
}

// decodeWorkerInfo decodes a heartbeat's data.
func decodeWorkerInfo(b []byte) (WorkerInfo, error) {
	var wi WorkerInfo
	if err := json.Unmarshal(b, &wi); err != nil {
		return WorkerInfo{}, fmt.Errorf("errand: heartbeat: %w", err)
	}
	if wi.ID == "" {
		return WorkerInfo{}, fmt.Errorf("errand: heartbeat without a worker ID")
	}
	return wi, nil
}

package errand

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
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
	if r == nil {
		return
	}
	r.mu.Lock()
	r.m[sig.UUID] = RunningTask{UUID: sig.UUID, Name: sig.Name, Queue: queue, StartedAt: time.Now().UTC()}
	r.mu.Unlock()
}

func (r *runningTasks) remove(sig *Signature) {
	if r == nil {
		return
	}
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
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), strings.ReplaceAll(newUUID(), "-", "")[:8])
}

// heartbeat beats until the worker has drained — fetching stopped and
// every task returned — with the tasks still running, so that during a
// graceful shutdown the registry shows the worker until its last task is
// done; then it removes the worker's entry. Once Shutdown gives up on a
// silent server (its ctx done and the grace over, every call cancelled) it
// stops at once, leaving the entry to expire.
func (w *Worker) heartbeat() {
	if w.fetchCtx.Err() != nil {
		return // shut down before the first beat: nothing to show or remove
	}
	h := w.srv.broker.can.heartbeater
	host, _ := os.Hostname()
	info := WorkerInfo{ID: w.id, Host: host, PID: os.Getpid(), Queues: w.queueNames(),
		Concurrency: w.cfg.Concurrency, StartedAt: time.Now().UTC()}
	ttl := 3 * w.cfg.Heartbeat
	failing := false
	beat := func() {
		info.Running, info.BeatAt = w.running.list(), time.Now().UTC()
		data, err := json.Marshal(info)
		if err != nil {
			w.report(err, "errand: encode heartbeat")
			return
		}
		ctx, cancel := w.call()
		defer cancel()
		if err = w.srv.broker.before(ctx); err == nil {
			err = w.srv.broker.after(ctx, h.Beat(ctx, w.id, data, ttl))
		}
		switch {
		case err != nil && !failing && w.fetchCtx.Err() == nil:
			failing = true
			w.report(err, "errand: heartbeat", "worker", w.id)
		case err == nil:
			failing = false
		}
	}
	beat()
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			beat()
		case <-w.callCtx.Done():
			return // Shutdown gave up: no call can be made; the entry expires
		case <-w.drained:
			ctx, cancel := w.call()
			defer cancel()
			if err := w.srv.broker.before(ctx); err == nil {
				if err := h.Unbeat(ctx, w.id); err != nil {
					w.log.Warn("errand: remove heartbeat on shutdown", "worker", w.id, "err", w.srv.broker.after(ctx, err))
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

package errand

import (
	"slices"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
)

// pauseFlag is whether one of the worker's queues is paused, as the pause
// poller last saw it.
type pauseFlag struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when paused turns false
}

func (p *pauseFlag) set(paused bool) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == paused {
		return false
	}
	p.paused = paused
	if paused {
		p.resumed = make(chan struct{})
	} else {
		close(p.resumed)
	}
	return true
}

func (p *pauseFlag) on() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// wait returns a channel closed when the queue is resumed, or nil when it
// is not paused.
func (p *pauseFlag) wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		return nil
	}
	return p.resumed
}

// startBackground starts the pause poller and the heartbeat, where the
// broker has them.
func (w *Worker) startBackground() {
	if w.srv.broker.can.pauser != nil && w.cfg.PausePoll > 0 {
		w.bg.Go(func() {
			t := time.NewTicker(w.cfg.PausePoll)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					w.pollPause()
				case <-w.fetchCtx.Done():
					return
				}
			}
		})
	}
	if w.running != nil {
		w.bg.Go(w.heartbeat)
	}
}

// pollPause asks the broker which queues are paused, and sets the flag of
// each of the worker's queues. On an error the flags stay as they were.
func (w *Worker) pollPause() {
	p := w.srv.broker.can.pauser
	if p == nil || w.cfg.PausePoll <= 0 || w.fetchCtx.Err() != nil {
		return
	}
	ctx, cancel := w.call()
	defer cancel()
	if err := w.srv.broker.before(ctx); err != nil {
		return
	}
	qs, err := p.Paused(ctx)
	if err != nil {
		if w.fetchCtx.Err() == nil {
			w.report(w.srv.broker.after(ctx, err), "errand: read paused queues", "queues", w.queueNames())
		}
		return
	}
	for _, q := range w.queues {
		paused := slices.Contains(qs, q.name)
		if q.pause.set(paused) {
			if paused {
				w.log.Info("errand: queue paused: not fetching", "queue", q.name)
			} else {
				w.log.Info("errand: queue resumed", "queue", q.name)
			}
			kick(q.kick)
		}
	}
}

// giveBack releases deliveries fetched while their queue was being paused
// (or held when fetching stopped), unrun. The caller frees their slots.
// Release is all the driver contract offers: on a broker that counts
// deliveries the fetch counted (Attempt runs one ahead), and Redis puts
// the message at the tail of its queue (see docs/operations.md, Pause).
func (w *Worker) giveBack(ds []*driver.Delivery) {
	ctx, cancel := w.call()
	defer cancel()
	for _, d := range ds {
		if err := w.srv.broker.Release(ctx, d, time.Time{}); err != nil {
			w.report(err, "errand: give back a delivery not run", "message", d.ID, "queue", d.Queue)
		}
	}
}

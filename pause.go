package errand

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
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

// pauseParams are what a pausePoller needs of its worker.
type pauseParams struct {
	broker *portable.Broker
	pauser driver.Pauser
	queues []*workerQueue
	every  time.Duration   // WorkerConfig.PausePoll
	fetch  context.Context // done once the worker stops fetching: the poller stops
	call   func() (context.Context, context.CancelFunc)
	report func(err error, msg string, attrs ...any)
	log    *slog.Logger
	// changed is called, under no lock, for each queue whose flag changed.
	changed func(q *workerQueue)
}

// pausePoller asks the broker (driver.Pauser) every WorkerConfig.PausePoll
// which queues are paused, and sets the pause flag of each of the worker's
// queues, which its fetch loop obeys. It owns one goroutine, from start
// until wait returns; it stops when the worker stops fetching.
type pausePoller struct {
	pauseParams
	wg sync.WaitGroup
}

func newPausePoller(p pauseParams) *pausePoller { return &pausePoller{pauseParams: p} }

// start polls every PausePoll until fetching stops. A nil poller does
// nothing.
func (p *pausePoller) start() {
	if p == nil {
		return
	}
	p.wg.Go(func() {
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.poll()
			case <-p.fetch.Done():
				return
			}
		}
	})
}

// wait returns once the poller's goroutine has returned.
func (p *pausePoller) wait() {
	if p != nil {
		p.wg.Wait()
	}
}

// poll asks the broker which queues are paused, once, and sets the flag
// of each of the worker's queues. On an error the flags stay as they were.
// A nil poller does nothing.
func (p *pausePoller) poll() {
	if p == nil || p.fetch.Err() != nil {
		return
	}
	ctx, cancel := p.call()
	defer cancel()
	if err := p.broker.Before(ctx); err != nil {
		return
	}
	qs, err := p.pauser.Paused(ctx)
	if err != nil {
		if p.fetch.Err() == nil {
			names := make([]string, len(p.queues))
			for i, q := range p.queues {
				names[i] = q.name
			}
			p.report(p.broker.After(ctx, err), "errand: read paused queues", "queues", names)
		}
		return
	}
	for _, q := range p.queues {
		paused := slices.Contains(qs, q.name)
		if q.pause.set(paused) {
			if paused {
				p.log.Info("errand: queue paused: not fetching", "queue", q.name)
			} else {
				p.log.Info("errand: queue resumed", "queue", q.name)
			}
			p.changed(q)
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

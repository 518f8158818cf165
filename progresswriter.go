package errand

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The engine side of SetProgress (progress.go): each attempt's progress
// writer.

type progressKey struct{}

// progressParams build a progressWriter.
type progressParams struct {
	uuid, name string
	every      time.Duration // WorkerConfig.ProgressEvery (0: no interval)
	limit      int           // WorkerConfig.MaxProgressSize (<= 0: none)
	sink       progressSink
}

// progressSink is where a progressWriter's values go (the delivery's
// attempt, progressOf).
type progressSink interface {
	// writeProgress records one value (the attempt's STARTED state with
	// Progress set), under a bounded ctx of its own; it returns when the
	// backend answered.
	writeProgress(v json.RawMessage) error
	// progressCancelled cancels the task's ctx with cause (wrapping
	// ErrCancelled): a write answered ErrCancelled.
	progressCancelled(cause error)
	// progressFailed reports any other write error.
	progressFailed(err error)
}

// progressWriter writes one attempt's progress in the background: one
// goroutine, started by the first SetProgress (which makes its channels:
// an attempt that reports no progress costs no allocation), writes the
// latest value, waits every, and writes again only when a newer value
// came (the trailing write). stop ends it and waits for the write under way, so
// the attempt's final state, recorded after stop, is the last write. The
// delivery's runner owns it: made with the task's ctx (taskContext),
// stopped when the task's function returns (attempt) and, idempotently,
// when the ctx ends (endTask).
type progressWriter struct {
	progressParams
	mu      sync.Mutex
	latest  json.RawMessage // the last value set; nil: none
	dirty   bool            // latest is not written yet
	err     error           // the cancellation a write met; set refuses after it
	started bool            // run is running (or ran)
	stopped bool
	kick    chan struct{} // a value was set (capacity 1)
	stopc   chan struct{} // closed by stop
	done    chan struct{} // closed when run returns
}

// reset makes p a new attempt's writer, with params.
func (p *progressWriter) reset(params progressParams) {
	*p = progressWriter{progressParams: params}
}

// set makes v the latest value, to be written by run.
func (p *progressWriter) set(v json.RawMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopped:
		return fmt.Errorf("errand: SetProgress of task %s (%s) after its function returned: nothing recorded", p.name, p.uuid)
	case p.err != nil:
		return p.err
	}
	p.latest, p.dirty = v, true
	if !p.started {
		p.started = true
		p.kick, p.stopc, p.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go p.run()
	}
	select {
	case p.kick <- struct{}{}:
	default: // run will see the value
	}
	return nil
}

// run writes the latest value each time one is set, at most once per
// p.every, until stop.
func (p *progressWriter) run() {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
		case <-p.stopc:
			return
		}
		p.mu.Lock()
		v, dirty := p.latest, p.dirty
		p.dirty = false
		p.mu.Unlock()
		if !dirty {
			continue
		}
		if err := p.sink.writeProgress(v); err != nil {
			if errors.Is(err, ErrCancelled) {
				cause := fmt.Errorf("errand: task %s (%s) was cancelled (the backend refused its progress): %w", p.name, p.uuid, err)
				p.mu.Lock()
				p.err = cause
				p.mu.Unlock()
				p.sink.progressCancelled(cause)
				return
			}
			p.sink.progressFailed(fmt.Errorf("errand: task %s (%s): record progress: %w", p.name, p.uuid, err))
		}
		if p.every > 0 {
			t := time.NewTimer(p.every)
			select {
			case <-t.C:
			case <-p.stopc:
				t.Stop()
				return
			}
		}
	}
}

// stop ends the writer, waiting for a write under way, and returns the
// last value set (nil: none), for the attempt's final state. Later calls
// return the same value and wait for nothing.
func (p *progressWriter) stop() json.RawMessage {
	p.mu.Lock()
	started, already := p.started, p.stopped
	p.stopped = true
	v := p.latest
	p.mu.Unlock()
	if started && !already {
		close(p.stopc)
	}
	if started {
		<-p.done
	}
	return v
}

// startProgress makes dv.prog its attempt's progress writer: each write
// records the attempt's STARTED state with the value as its Progress,
// unless the delivery's lease is lost (another worker may own the task:
// nothing is written).
func (dv *delivery) startProgress() {
	w, sig := dv.w, dv.sig
	dv.prog.reset(progressParams{uuid: sig.UUID, name: sig.Name, every: w.cfg.ProgressEvery, limit: w.cfg.MaxProgressSize, sink: dv})
}

func (dv *delivery) writeProgress(v json.RawMessage) error {
	if dv.ext.LostCause() != nil {
		return nil
	}
	st := *dv.started // its fields do not change while the function runs
	st.Progress = v
	ctx, cancel := dv.w.call()
	defer cancel()
	return dv.w.srv.backend.SetState(ctx, &st)
}

// progressCancelled: the task's cancel (cancelwatch.go): its ctx ends
// with the cause, and its outcome is discarded.
func (dv *delivery) progressCancelled(cause error) { dv.cancel.set(cause) }

func (dv *delivery) progressFailed(err error) {
	dv.w.report(err, "errand: progress not recorded", dv.attrs()...)
}

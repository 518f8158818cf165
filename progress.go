package errand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// SetProgress records v, JSON-encoded, as the running task's progress:
// call it from a task function with the ctx the worker gave it. Producers
// read the last value through AsyncResult.Progress (or
// TaskState.Progress, from AsyncResult.State), and the task's final state
// (SUCCESS, FAILURE or RETRY) keeps it.
//
// It never waits for the backend: the value is written in the background,
// at most once per WorkerConfig.ProgressEvery (the first at once; in
// between, the latest value is kept and written when the interval ends),
// so a tight loop calling it costs a bounded number of writes. No write
// lands after the attempt's final state, which carries the last value set.
//
// It returns an error, recording nothing, when ctx is not a running task's
// (outside a task, or after its function returned), when v does not
// encode, and when the encoding is larger than WorkerConfig.MaxProgressSize
// (4 KiB by default; the error satisfies errors.Is(err,
// ErrPayloadTooLarge)). When the backend answers a progress write with
// ErrCancelled (the task was cancelled), the task's ctx is cancelled with
// a cause satisfying errors.Is(cause, ErrCancelled), and SetProgress
// returns that cause from then on. Other errors of the background writes
// go to the worker's ErrorHandler and log, not to the task.
func SetProgress(ctx context.Context, v any) error {
	p, _ := ctx.Value(progressKey{}).(*progressWriter)
	if p == nil {
		return errors.New("errand: SetProgress: ctx is not a running task's (pass the ctx the worker gave the task function): nothing recorded")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("errand: SetProgress of task %s (%s): %w: nothing recorded", p.name, p.uuid, err)
	}
	if p.limit > 0 && len(b) > p.limit {
		return fmt.Errorf("%w: SetProgress of task %s (%s): the value is %d bytes encoded, over the worker's MaxProgressSize of %d bytes: nothing recorded",
			ErrPayloadTooLarge, p.name, p.uuid, len(b), p.limit)
	}
	return p.set(b)
}

// Progress decodes the task's last reported progress (SetProgress) into
// the value dst points to, and reports whether there was one: false, with
// a nil error, when the task has reported none yet (or its state holds
// none). An unknown or expired task is an error satisfying
// errors.Is(err, ErrTaskNotFound). It reads the state once, without
// waiting.
func (r *AsyncResult) Progress(ctx context.Context, dst any) (bool, error) {
	st, err := r.State(ctx)
	if err != nil {
		return false, err
	}
	if len(st.Progress) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(st.Progress, dst); err != nil {
		return true, fmt.Errorf("errand: decode progress of task %s (%s): %w", st.TaskName, st.TaskUUID, err)
	}
	return true, nil
}

type progressKey struct{}

// progressParams build a progressWriter.
type progressParams struct {
	uuid, name string
	every      time.Duration // WorkerConfig.ProgressEvery (0: no interval)
	limit      int           // WorkerConfig.MaxProgressSize (<= 0: none)
	// write records one value (the attempt's STARTED state with Progress
	// set), under a bounded ctx of its own; it returns when the backend
	// answered.
	write func(v json.RawMessage) error
	// cancel cancels the task's ctx with cause (wrapping ErrCancelled):
	// a write answered ErrCancelled.
	cancel func(cause error)
	report func(err error) // any other write error
}

// progressWriter writes one attempt's progress in the background: one
// goroutine, started by the first SetProgress, writes the latest value,
// waits every, and writes again only when a newer value came (the
// trailing write). stop ends it and waits for the write under way, so
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

func newProgress(p progressParams) *progressWriter {
	return &progressWriter{progressParams: p, kick: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{})}
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
		if err := p.write(v); err != nil {
			if errors.Is(err, ErrCancelled) {
				cause := fmt.Errorf("errand: task %s (%s) was cancelled (the backend refused its progress): %w", p.name, p.uuid, err)
				p.mu.Lock()
				p.err = cause
				p.mu.Unlock()
				p.cancel(cause)
				return
			}
			p.report(fmt.Errorf("errand: task %s (%s): record progress: %w", p.name, p.uuid, err))
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
	if !already {
		close(p.stopc)
	}
	if started {
		<-p.done
	}
	return v
}

// newProgress returns the progress writer of the delivery's attempt: each
// write records the attempt's STARTED state with the value as its
// Progress, unless the delivery's lease is lost (another worker may own
// the task: nothing is written).
func (dv *delivery) newProgress() *progressWriter {
	w, sig := dv.w, dv.sig
	base := *dv.started // its fields do not change while the function runs
	return newProgress(progressParams{
		uuid: sig.UUID, name: sig.Name, every: w.cfg.ProgressEvery, limit: w.cfg.MaxProgressSize,
		write: func(v json.RawMessage) error {
			if dv.ext.LostCause() != nil {
				return nil
			}
			st := base
			st.Progress = v
			ctx, cancel := w.call()
			defer cancel()
			return w.srv.backend.SetState(ctx, &st)
		},
		// The task's cancel (cancelwatch.go): its ctx ends with the
		// cause, and its outcome is discarded.
		cancel: dv.cancel.set,
		report: func(err error) { w.report(err, "errand: progress not recorded", dv.attrs()...) },
	})
}

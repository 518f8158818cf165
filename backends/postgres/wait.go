package postgresbackend

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// WaitState blocks until the task's state satisfies done, ctx is done,
// or the task is unknown or expired (driver.ErrTaskNotFound). It reads
// the state, then waits for a notification of the task (each write of a
// SUCCESS or FAILURE notifies pgdb.StatesChannel in its own statement,
// delivered when it commits) and reads it again; when no notification
// comes within PollInterval (a wait for another state, or a notification
// lost while the listening connection was down) it reads anyway. A read that fails (the server restarting) is
// tried again at the next wake-up, so a waiter outlives an outage.
func (b *Backend) WaitState(ctx context.Context, id string, done func(*driver.TaskState) bool) (*driver.TaskState, error) {
	wake, remove := b.waiters.add(id)
	defer remove()
	timer := time.NewTimer(b.opts.PollInterval)
	defer timer.Stop()
	for {
		st, err := b.GetState(ctx, id)
		switch {
		case err == nil && done(st):
			return st, nil
		case err == nil:
		case errors.Is(err, driver.ErrTaskNotFound), errors.Is(err, driver.ErrClosed), ctx.Err() != nil, errors.Is(err, errDecode):
			return nil, err
		}
		timer.Reset(b.opts.PollInterval)
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waiters are the WaitState calls of a backend, woken by its listener:
// one connection of its own (outside the pool), started by the first
// WaitState, LISTENing on the states channel until Close.
type waiters struct {
	b       *Backend
	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{} // task id -> its waiters' wake channels
	started bool
	closed  bool
}

func newWaiters(b *Backend) *waiters {
	return &waiters{b: b, subs: map[string]map[chan struct{}]struct{}{}}
}

// add registers a waiter of task id: wake gets a value after each
// notification of its state (and when the listener (re)connects, as one
// may have been missed); remove unregisters it.
func (w *waiters) add(id string) (wake chan struct{}, remove func()) {
	wake = make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[id] == nil {
		w.subs[id] = map[chan struct{}]struct{}{}
	}
	w.subs[id][wake] = struct{}{}
	if !w.started && !w.closed {
		w.started = true
		w.b.wg.Go(w.listen)
	}
	return wake, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.subs[id], wake)
		if len(w.subs[id]) == 0 {
			delete(w.subs, id)
		}
	}
}

// close keeps a listener from starting after Close, and wakes every
// waiter: its next read answers driver.ErrClosed.
func (w *waiters) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wake("", true)
}

// wake wakes the waiters of id, or every waiter when all.
func (w *waiters) wake(id string, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	notify := func(chs map[chan struct{}]struct{}) {
		for ch := range chs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if all {
		for _, chs := range w.subs {
			notify(chs)
		}
		return
	}
	notify(w.subs[id])
}

// listen holds the listening connection until Close: it connects,
// LISTENs, wakes every waiter (a notification may have been missed
// before), then wakes each notified task's waiters; on a failure it
// connects again after relisten (the waiters poll meanwhile).
func (w *waiters) listen() {
	b := w.b
	channel := "LISTEN " + pgx.Identifier{pgdb.StatesChannel(b.opts.Schema)}.Sanitize()
	retry := min(b.opts.PollInterval, relisten)
	for b.life.Err() == nil {
		err := w.listenOnce(b.life, channel)
		if b.life.Err() != nil {
			return
		}
		b.logger.Warn("postgres backend: the connection listening for state changes failed; waiters poll until it is back", "err", err, "retry_in", retry)
		select {
		case <-b.life.Done():
			return
		case <-time.After(retry):
		}
	}
}

// relisten is the longest the listener waits before it connects again
// after a failure (PollInterval when shorter).
const relisten = time.Second

func (w *waiters) listenOnce(ctx context.Context, listen string) error {
	b := w.b
	cctx, cancel := b.bound(ctx)
	conn, err := pgx.ConnectConfig(cctx, b.pool.Config().ConnConfig.Copy())
	if err == nil {
		_, err = conn.Exec(cctx, listen)
	}
	cancel()
	if conn != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			conn.Close(cctx)
		}()
	}
	if err != nil {
		return err
	}
	w.wake("", true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		w.wake(n.Payload, false)
	}
}

package redisbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/errand-go/errand/driver"
)

var _ driver.CancelNotifier = (*Broker)(nil)

// Cancel notices (driver.CancelNotifier) go over Redis's pub/sub, on the
// channel PREFIX:cancel (cancelChannel) of the broker's server: every
// broker of that prefix hears them, whichever queues it serves. A
// notice is the JSON array of the cancelled tasks' UUIDs. On a Redis
// Cluster a PUBLISH reaches the subscribers of every node; through
// Sentinel, the current master's. Notices are not stored: a listener
// away when one is sent (reconnecting, or not yet started) never gets
// it, and errand finds the cancel in the backend at the task's next
// lease extension instead.

// cancelChannel is the pub/sub channel of the broker's cancel notices.
func (b *Broker) cancelChannel() string { return b.opts.Prefix + ":cancel" }

// NotifyCancel publishes one notice naming taskUUIDs to every listener of
// the broker's prefix on its server (one PUBLISH). It does not block
// beyond the call; an empty list sends nothing.
func (b *Broker) NotifyCancel(ctx context.Context, taskUUIDs []string) error {
	if b.closed.Load() {
		return fmt.Errorf("redis broker: %w", driver.ErrClosed)
	}
	if len(taskUUIDs) == 0 {
		return nil
	}
	payload, err := json.Marshal(taskUUIDs)
	if err != nil {
		return fmt.Errorf("redis broker: encode cancel notice: %w", err)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.err(ctx, b.rdb.Publish(ctx, b.cancelChannel(), payload).Err())
}

// ListenCancel subscribes to the broker's cancel channel and returns once
// the server confirmed the subscription; then one goroutine of the broker
// calls notify with the UUIDs of each notice, until ctx is done or the
// broker is closed (Close waits for it). The subscription is go-redis's
// PubSub, which reconnects and subscribes again on its own after a lost
// connection (and checks an idle one with a PING every few seconds);
// notices sent meanwhile are lost. A message on the channel that is not a
// notice (another program's) is ignored.
func (b *Broker) ListenCancel(ctx context.Context, notify func(taskUUIDs []string)) error {
	done, ok := b.listeners.add()
	if !ok {
		return fmt.Errorf("redis broker: %w", driver.ErrClosed)
	}
	sctx, cancel := b.bound(ctx)
	ps := b.rdb.Subscribe(sctx, b.cancelChannel())
	_, err := ps.Receive(sctx) // the subscription's confirmation, or why not
	cancel()
	if err != nil {
		ps.Close()
		b.listeners.wg.Done()
		return b.err(ctx, fmt.Errorf("listen for cancel notices: %w", err))
	}
	msgs := ps.Channel()
	go func() {
		defer b.listeners.wg.Done()
		defer ps.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				var ids []string
				if json.Unmarshal([]byte(m.Payload), &ids) != nil || len(ids) == 0 {
					continue // not a notice
				}
				select {
				case <-done: // a notice that came as the broker closed
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				notify(ids)
			}
		}
	}()
	return nil
}

// cancelListeners tracks the goroutines of ListenCancel, so that Close
// ends them and waits for them. The zero value is ready to use.
type cancelListeners struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by close; made by the first add
	wg     sync.WaitGroup
}

// add counts one more listener and returns the channel that close
// closes; false once closed (nothing counted).
func (l *cancelListeners) add() (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false
	}
	if l.done == nil {
		l.done = make(chan struct{})
	}
	l.wg.Add(1)
	return l.done, true
}

// close tells every listener to end and waits until they have.
func (l *cancelListeners) close() {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		if l.done != nil {
			close(l.done)
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
}

package memorybroker

import (
	"context"
	"slices"
	"sync"

	"github.com/errand-go/errand/driver"
)

var _ driver.CancelNotifier = (*Broker)(nil)

// cancelListener is one ListenCancel: the notices not yet passed to its
// notify, and the signal that more came.
type cancelListener struct {
	queue [][]string    // guarded by the broker's mu
	more  chan struct{} // capacity 1: a notice is queued
}

// NotifyCancel sends one notice naming taskUUIDs to every listener of the
// broker value (every Server using it: a memory://NAME broker's, every
// Server of the process that opens the name). It never blocks: each
// listener has its own queue, passed to its notify on its own goroutine.
func (b *Broker) NotifyCancel(_ context.Context, taskUUIDs []string) error {
	return b.locked(func() {
		ids := slices.Clone(taskUUIDs)
		for l := range b.listeners {
			l.queue = append(l.queue, ids)
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	})
}

// ListenCancel calls notify with the UUIDs of each notice sent after it
// returned, one call at a time, from a goroutine of the broker's, until
// ctx is done or the broker is closed; Close waits for that goroutine.
func (b *Broker) ListenCancel(ctx context.Context, notify func(taskUUIDs []string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l := &cancelListener{more: make(chan struct{}, 1)}
	if err := b.locked(func() {
		if b.listeners == nil {
			b.listeners = map[*cancelListener]struct{}{}
			b.closing = make(chan struct{})
		}
		b.listeners[l] = struct{}{}
		b.listening.Add(1)
	}); err != nil {
		return err
	}
	closing := b.closing
	go func() {
		defer b.listening.Done()
		defer func() {
			b.mu.Lock()
			delete(b.listeners, l)
			b.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-closing:
				return
			case <-l.more:
			}
			b.mu.Lock()
			notices := l.queue
			l.queue = nil
			b.mu.Unlock()
			for _, ids := range notices {
				notify(ids)
			}
		}
	}()
	return nil
}

// stopListeners ends every listener and waits for their goroutines (Close).
func (b *Broker) stopListeners(closing chan struct{}, listening *sync.WaitGroup) {
	if closing != nil {
		close(closing)
	}
	listening.Wait()
}

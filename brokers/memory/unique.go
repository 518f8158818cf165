package memorybroker

import (
	"context"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.Uniquer = (*Broker)(nil)

// uniqueLock is one held uniqueness lock (driver.Uniquer).
type uniqueLock struct {
	holder string
	until  time.Time
}

// Lock takes key for id for ttl unless another id holds it, under the
// broker's lock (one atomic step), and returns the holder. An expired lock
// is dropped as it is found. Inside a transaction (a *Tx in ctx) the key
// is taken in the Tx, held for others once it commits.
func (b *Broker) Lock(ctx context.Context, key, id string, ttl time.Duration) (holder string, err error) {
	if ok, err := b.inTx(ctx, func(w *txWrites) (err error) { holder, err = w.lock(key, id, ttl); return err }); ok {
		return holder, err
	}
	err = b.locked(func() {
		if b.locks == nil {
			b.locks = make(map[string]uniqueLock)
		}
		now := time.Now()
		if l, ok := b.locks[key]; ok && l.holder != id && l.until.After(now) {
			holder = l.holder
			return
		}
		b.locks[key] = uniqueLock{holder: id, until: now.Add(ttl)}
		holder = id
	})
	return holder, err
}

// Unlock frees key if id holds it; otherwise it does nothing. Inside a
// transaction (a *Tx in ctx) it frees it in the Tx.
func (b *Broker) Unlock(ctx context.Context, key, id string) error {
	if ok, err := b.inTx(ctx, func(w *txWrites) error {
		w.locks = append(w.locks, txLock{key: key, id: id, unlock: true})
		return nil
	}); ok {
		return err
	}
	return b.locked(func() {
		if l, ok := b.locks[key]; ok && (l.holder == id || !l.until.After(time.Now())) {
			delete(b.locks, key)
		}
	})
}

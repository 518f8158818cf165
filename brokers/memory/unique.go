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
// is dropped as it is found.
func (b *Broker) Lock(_ context.Context, key, id string, ttl time.Duration) (holder string, err error) {
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

// Unlock frees key if id holds it; otherwise it does nothing.
func (b *Broker) Unlock(_ context.Context, key, id string) error {
	return b.locked(func() {
		if l, ok := b.locks[key]; ok && (l.holder == id || !l.until.After(time.Now())) {
			delete(b.locks, key)
		}
	})
}

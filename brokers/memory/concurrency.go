package memorybroker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.ConcurrencyLimiter = (*Broker)(nil)

// slotHolders are the holders of one key's slots, each with when its slot
// lapses; a slot past its time is free, whoever held it.
type slotHolders map[string]time.Time

// Acquire takes a slot of every key of slots for holder, all or none,
// under the broker's lock (see driver.ConcurrencyLimiter). The slots are
// this broker value's: every Server and worker sharing it shares them,
// and nothing outside the process does.
func (b *Broker) Acquire(_ context.Context, holder string, slots []driver.Slot, ttl time.Duration) (ok bool, err error) {
	for _, s := range slots {
		if s.Limit < 1 {
			return false, fmt.Errorf("memory broker: concurrency limit %q: limit %d: want 1 or more", s.Key, s.Limit)
		}
	}
	err = b.locked(func() {
		if b.slots == nil {
			b.slots = make(map[string]slotHolders)
		}
		now := time.Now()
		for _, s := range slots {
			if b.othersHolding(s.Key, holder, now) >= s.Limit {
				return
			}
		}
		for _, s := range slots {
			hs := b.slots[s.Key]
			if hs == nil {
				hs = make(slotHolders)
				b.slots[s.Key] = hs
			}
			hs[holder] = now.Add(ttl)
		}
		ok = true
	})
	return ok, err
}

// othersHolding counts the holders other than holder whose slot of key
// has not lapsed at now, forgetting the lapsed ones; b.mu is held.
func (b *Broker) othersHolding(key, holder string, now time.Time) int {
	n := 0
	for h, until := range b.slots[key] {
		switch {
		case !until.After(now):
			delete(b.slots[key], h)
		case h != holder:
			n++
		}
	}
	return n
}

// Renew renews holder's slots of keys for ttl; a lapsed one is not, and
// makes the answer an error wrapping driver.ErrLeaseLost.
func (b *Broker) Renew(_ context.Context, holder string, keys []string, ttl time.Duration) error {
	var lost []string
	err := b.locked(func() {
		now := time.Now()
		for _, k := range keys {
			until, ok := b.slots[k][holder]
			if !ok || !until.After(now) {
				delete(b.slots[k], holder)
				lost = append(lost, k)
				continue
			}
			b.slots[k][holder] = now.Add(ttl)
		}
	})
	if err == nil && len(lost) > 0 {
		err = fmt.Errorf("memory broker: concurrency slots %s of %q: %w", strings.Join(lost, ", "), holder, driver.ErrLeaseLost)
	}
	return err
}

// Free gives holder's slots of keys back.
func (b *Broker) Free(_ context.Context, holder string, keys []string) error {
	return b.locked(func() {
		for _, k := range keys {
			delete(b.slots[k], holder)
			if len(b.slots[k]) == 0 {
				delete(b.slots, k)
			}
		}
	})
}

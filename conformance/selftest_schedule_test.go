package conformance

// Broken variants of the memory broker's schedule store, for the
// self-test.

import (
	"context"
	"sync"
	"time"
)

// brokenSchedules replaces the schedule store's methods it sets.
type brokenSchedules struct {
	put    func(b *brokenBroker, ctx context.Context, id string, data []byte) error
	delete func(b *brokenBroker, ctx context.Context, id string) error
	claim  func(b *brokenBroker, ctx context.Context, id string, tick time.Time) (bool, error)
	last   func(b *brokenBroker, ctx context.Context, id string) (time.Time, error)
}

func (b *brokenBroker) PutSchedule(ctx context.Context, id string, data []byte) error {
	if b.schedules.put != nil {
		return b.schedules.put(b, ctx, id, data)
	}
	return b.Broker.PutSchedule(ctx, id, data)
}
func (b *brokenBroker) DeleteSchedule(ctx context.Context, id string) error {
	if b.schedules.delete != nil {
		return b.schedules.delete(b, ctx, id)
	}
	return b.Broker.DeleteSchedule(ctx, id)
}
func (b *brokenBroker) ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error) {
	if b.schedules.claim != nil {
		return b.schedules.claim(b, ctx, id, tick)
	}
	return b.Broker.ClaimTick(ctx, id, tick)
}
func (b *brokenBroker) LastTick(ctx context.Context, id string) (time.Time, error) {
	if b.schedules.last != nil {
		return b.schedules.last(b, ctx, id)
	}
	return b.Broker.LastTick(ctx, id)
}

// brokenScheduleStores join brokenBrokers (see init there).
var brokenScheduleStores = map[string]BrokerHarness{
	// Put keeps the first definition: a change never reaches the replicas.
	"schedule-change-lost": brokenBrokerHarness(func(b *brokenBroker) {
		b.schedules.put = func(b *brokenBroker, ctx context.Context, id string, data []byte) error {
			all, err := b.Broker.Schedules(ctx)
			if err != nil {
				return err
			}
			if _, ok := all[id]; ok {
				return nil
			}
			return b.Broker.PutSchedule(ctx, id, data)
		}
	}),
	// Delete empties the definition instead of removing the schedule.
	"delete-keeps-schedule": brokenBrokerHarness(func(b *brokenBroker) {
		b.schedules.delete = func(b *brokenBroker, ctx context.Context, id string) error {
			return b.Broker.PutSchedule(ctx, id, []byte{})
		}
	}),
	// Reads the tick, then writes it: a read-modify-write in the driver,
	// so concurrent claims of one tick all win.
	"claim-not-atomic": brokenBrokerHarness(func(b *brokenBroker) {
		b.schedules.claim = func(b *brokenBroker, ctx context.Context, id string, tick time.Time) (bool, error) {
			last, err := b.Broker.LastTick(ctx, id)
			if err != nil || !tick.After(last) {
				return false, err
			}
			time.Sleep(time.Millisecond) // the round trip between the read and the write
			_, err = b.Broker.ClaimTick(ctx, id, tick)
			return err == nil, err
		}
	}),
	// A tick older than the one claimed wins too (a set, not a
	// compare-and-set).
	"claim-accepts-older": brokenBrokerHarness(func(b *brokenBroker) {
		b.schedules.claim = func(b *brokenBroker, ctx context.Context, id string, tick time.Time) (bool, error) {
			last, err := b.Broker.LastTick(ctx, id)
			if err == nil && tick.Before(last) {
				return true, nil
			}
			return b.Broker.ClaimTick(ctx, id, tick)
		}
	}),
	// Delete removes the definition but the claimed tick lives on (a
	// separate key the delete forgets).
	"delete-keeps-claims": brokenBrokerHarness(func(b *brokenBroker) {
		var mu sync.Mutex
		kept := map[string]time.Time{}
		b.schedules.delete = func(b *brokenBroker, ctx context.Context, id string) error {
			last, err := b.Broker.LastTick(ctx, id)
			if err != nil {
				return err
			}
			mu.Lock()
			if last.After(kept[id]) {
				kept[id] = last
			}
			mu.Unlock()
			return b.Broker.DeleteSchedule(ctx, id)
		}
		b.schedules.last = func(b *brokenBroker, ctx context.Context, id string) (time.Time, error) {
			last, err := b.Broker.LastTick(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if k := kept[id]; k.After(last) {
				return k, err
			}
			return last, err
		}
		b.schedules.claim = func(b *brokenBroker, ctx context.Context, id string, tick time.Time) (bool, error) {
			mu.Lock()
			k := kept[id]
			mu.Unlock()
			if !tick.After(k) {
				return false, nil
			}
			return b.Broker.ClaimTick(ctx, id, tick)
		}
	}),
}

package memorybroker

import (
	"context"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.ScheduleStore = (*Broker)(nil)

// schedule is one periodic schedule: its definition and the latest tick
// claimed (zero: none), in milliseconds like every driver keeps it.
type schedule struct {
	data []byte
	tick time.Time
}

// PutSchedule stores data as schedule id's definition, keeping its claimed
// tick. Every Server using this broker value sees it.
func (b *Broker) PutSchedule(_ context.Context, id string, data []byte) error {
	return b.locked(func() {
		if b.schedules == nil {
			b.schedules = make(map[string]*schedule)
		}
		sc := b.schedules[id]
		if sc == nil {
			sc = &schedule{}
			b.schedules[id] = sc
		}
		sc.data = slices.Clone(data)
	})
}

// DeleteSchedule removes schedule id with its claimed tick.
func (b *Broker) DeleteSchedule(_ context.Context, id string) error {
	return b.locked(func() { delete(b.schedules, id) })
}

// Schedules returns every definition, by schedule ID.
func (b *Broker) Schedules(context.Context) (out map[string][]byte, err error) {
	err = b.locked(func() {
		out = make(map[string][]byte, len(b.schedules))
		for id, sc := range b.schedules {
			out[id] = slices.Clone(sc.data)
		}
	})
	return out, err
}

// ClaimTick records tick for schedule id when id exists and tick is later
// than the tick recorded, under the broker's mutex.
func (b *Broker) ClaimTick(_ context.Context, id string, tick time.Time) (won bool, err error) {
	tick = time.UnixMilli(tick.UnixMilli())
	err = b.locked(func() {
		sc := b.schedules[id]
		if sc == nil || !tick.After(sc.tick) {
			return
		}
		sc.tick, won = tick, true
	})
	return won, err
}

// LastTick returns the latest tick claimed for id (zero: none).
func (b *Broker) LastTick(_ context.Context, id string) (t time.Time, err error) {
	err = b.locked(func() {
		if sc := b.schedules[id]; sc != nil {
			t = sc.tick
		}
	})
	return t, err
}

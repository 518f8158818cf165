package postgresbroker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
)

var _ driver.ScheduleStore = (*Broker)(nil)

// The schedule store (driver.ScheduleStore) of errand's periodic
// scheduler: one row of schedules per schedule, its definition and the
// latest tick a replica claimed (Unix ms), so a schedule's state is
// bounded (never a row per tick) and deleting the row deletes both.
// ClaimTick is one conditional UPDATE: concurrent claims of one tick
// queue on the row's lock, and each one after the first finds the tick
// claimed (READ COMMITTED re-reads the row it waited for) and changes
// nothing.

const (
	// putScheduleSQL stores $2 as schedule $1's definition, keeping its
	// claimed tick.
	putScheduleSQL = `
INSERT INTO {schedules} (id, data) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET data = excluded.data`
	deleteScheduleSQL = `DELETE FROM {schedules} WHERE id = $1`
	schedulesSQL      = `SELECT id, data FROM {schedules}`
	// claimTickSQL records tick $2 (Unix ms) for schedule $1 when it is
	// later than the one recorded.
	claimTickSQL = `
UPDATE {schedules} SET last_tick = $2
WHERE id = $1 AND (last_tick IS NULL OR last_tick < $2)`
	lastTickSQL = `SELECT last_tick FROM {schedules} WHERE id = $1`
)

// PutSchedule stores data as schedule id's definition, keeping its
// claimed tick.
func (b *Broker) PutSchedule(ctx context.Context, id string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	_, err := b.opsExec(ctx, "put schedule", b.opsSQL().putSchedule, id, data)
	return err
}

// DeleteSchedule removes schedule id and its claimed tick (one row).
func (b *Broker) DeleteSchedule(ctx context.Context, id string) error {
	_, err := b.opsExec(ctx, "delete schedule", b.opsSQL().deleteSchedule, id)
	return err
}

type scheduleRow struct {
	ID   string
	Data []byte
}

// Schedules returns every stored definition, by schedule ID.
func (b *Broker) Schedules(ctx context.Context) (map[string][]byte, error) {
	rows, err := opsRows(ctx, b, "list schedules", b.opsSQL().schedules, pgx.RowToStructByPos[scheduleRow])
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(rows))
	for _, r := range rows {
		out[r.ID] = r.Data
	}
	return out, nil
}

// ClaimTick records tick (at millisecond precision) as schedule id's
// latest claimed tick when id is stored and tick is later than the one
// recorded; reports whether it did.
func (b *Broker) ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error) {
	n, err := b.opsExec(ctx, "claim schedule tick", b.opsSQL().claimTick, id, tick.UnixMilli())
	return n == 1, err
}

// LastTick returns the latest tick claimed for schedule id; the zero time
// when none was (or id is unknown).
func (b *Broker) LastTick(ctx context.Context, id string) (time.Time, error) {
	var ms *int64
	found, err := b.opsRow(ctx, pgxWriter(b), "read last schedule tick", b.opsSQL().lastTick, []any{id}, &ms)
	if err != nil || !found || ms == nil {
		return time.Time{}, err
	}
	return time.UnixMilli(*ms), nil
}

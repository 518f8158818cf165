package postgresbroker

import (
	"context"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
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
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if data == nil {
		data = []byte{}
	}
	_, err := b.pool.Exec(ctx, b.opsSQL().putSchedule, id, data)
	return b.err(ctx, err)
}

// DeleteSchedule removes schedule id and its claimed tick (one row).
func (b *Broker) DeleteSchedule(ctx context.Context, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.pool.Exec(ctx, b.opsSQL().deleteSchedule, id)
	return b.err(ctx, err)
}

// Schedules returns every stored definition, by schedule ID.
func (b *Broker) Schedules(ctx context.Context) (map[string][]byte, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	rows, err := b.pool.Query(ctx, b.opsSQL().schedules)
	if err != nil {
		return nil, b.err(ctx, err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var id string
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return nil, b.err(ctx, err)
		}
		out[id] = data
	}
	if err := rows.Err(); err != nil {
		return nil, b.err(ctx, err)
	}
	return out, nil
}

// ClaimTick records tick (at millisecond precision) as schedule id's
// latest claimed tick when id is stored and tick is later than the one
// recorded; reports whether it did.
func (b *Broker) ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	tag, err := b.pool.Exec(ctx, b.opsSQL().claimTick, id, tick.UnixMilli())
	if err != nil {
		return false, b.err(ctx, err)
	}
	return tag.RowsAffected() == 1, nil
}

// LastTick returns the latest tick claimed for schedule id; the zero time
// when none was (or id is unknown).
func (b *Broker) LastTick(ctx context.Context, id string) (time.Time, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var ms *int64
	err := b.pool.QueryRow(ctx, b.opsSQL().lastTick, id).Scan(&ms)
	if pgdb.IsNoRows(err) || (err == nil && ms == nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, b.err(ctx, err)
	}
	return time.UnixMilli(*ms), nil
}

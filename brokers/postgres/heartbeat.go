package postgresbroker

import (
	"context"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.Heartbeater = (*Broker)(nil)

// Heartbeats (driver.Heartbeater): one row of heartbeats per live worker,
// its data until expires_at by the server's clock. Beats skips expired
// rows; the sweep (ops.go), which Beat runs when due, deletes them.

const (
	// beatSQL stores $2 for worker $1, alive for $3 ms.
	beatSQL = `
INSERT INTO {heartbeats} (id, data, expires_at)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond')
ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at`
	beatsSQL  = `SELECT data FROM {heartbeats} WHERE expires_at > clock_timestamp()`
	unbeatSQL = `DELETE FROM {heartbeats} WHERE id = $1`
)

// Beat stores data for worker id, alive for ttl (at least 1ms).
func (b *Broker) Beat(ctx context.Context, id string, data []byte, ttl time.Duration) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if data == nil {
		data = []byte{}
	}
	if _, err := b.pool.Exec(ctx, b.opsSQL().beat, id, data, max(ttl.Milliseconds(), 1)); err != nil {
		return b.err(ctx, err)
	}
	b.maybeSweep(ctx)
	return nil
}

// Beats returns the data of every worker whose ttl has not run out.
func (b *Broker) Beats(ctx context.Context) ([][]byte, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	rows, err := b.pool.Query(ctx, b.opsSQL().beats)
	if err != nil {
		return nil, b.err(ctx, err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, b.err(ctx, err)
		}
		out = append(out, data)
	}
	if err := rows.Err(); err != nil {
		return nil, b.err(ctx, err)
	}
	return out, nil
}

// Unbeat removes worker id's heartbeat at once.
func (b *Broker) Unbeat(ctx context.Context, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.pool.Exec(ctx, b.opsSQL().unbeat, id)
	return b.err(ctx, err)
}

package postgresbroker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

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
	if data == nil {
		data = []byte{}
	}
	if _, err := b.opsExec(ctx, "beat", b.opsSQL().beat, id, data, max(ttl.Milliseconds(), 1)); err != nil {
		return err
	}
	b.maybeSweep(ctx)
	return nil
}

// Beats returns the data of every worker whose ttl has not run out.
func (b *Broker) Beats(ctx context.Context) ([][]byte, error) {
	return opsRows(ctx, b, "list heartbeats", b.opsSQL().beats, pgx.RowTo[[]byte])
}

// Unbeat removes worker id's heartbeat at once.
func (b *Broker) Unbeat(ctx context.Context, id string) error {
	_, err := b.opsExec(ctx, "unbeat", b.opsSQL().unbeat, id)
	return err
}

package postgresbroker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
)

var _ driver.Pauser = (*Broker)(nil)

// Pausing (driver.Pauser): one row of pauses per paused queue, on the
// server, so a pause holds across processes and restarts until Resume.
// errand's workers poll Paused and stop fetching; Fetch also honours it
// itself (its statement takes nothing of a queue with a pauses row), so a
// consumer that does not poll takes nothing from a paused queue either.

const (
	pauseSQL  = `INSERT INTO {pauses} (queue) VALUES ($1) ON CONFLICT (queue) DO NOTHING`
	resumeSQL = `DELETE FROM {pauses} WHERE queue = $1`
	pausedSQL = `SELECT queue FROM {pauses} ORDER BY queue`
)

// Pause pauses queue (pausing a paused queue changes nothing).
func (b *Broker) Pause(ctx context.Context, queue string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.pool.Exec(ctx, b.opsSQL().pause, queue)
	return b.err(ctx, err)
}

// Resume resumes queue (resuming a queue not paused changes nothing).
func (b *Broker) Resume(ctx context.Context, queue string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.pool.Exec(ctx, b.opsSQL().resume, queue)
	return b.err(ctx, err)
}

// Paused returns the queues paused now, by name.
func (b *Broker) Paused(ctx context.Context) ([]string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	rows, err := b.pool.Query(ctx, b.opsSQL().paused)
	if err != nil {
		return nil, b.err(ctx, err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return qs, b.err(ctx, err)
}

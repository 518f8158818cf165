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
// itself (its statement takes nothing of a queue with a pauses row, and
// waits a PollInterval between looks, or until Resume notifies the
// queue), so a consumer that does not poll takes nothing from a paused
// queue either.

const (
	pauseSQL = `INSERT INTO {pauses} (queue) VALUES ($1) ON CONFLICT (queue) DO NOTHING`
	// resumeSQL: $1 queue, $2 the NOTIFY channel: a Fetch waiting on the
	// queue looks again at once.
	resumeSQL = `
WITH d AS (DELETE FROM {pauses} WHERE queue = $1 RETURNING queue)
SELECT pg_notify($2, queue)::text FROM d`
	pausedSQL = `SELECT queue FROM {pauses} ORDER BY queue`
)

// Pause pauses queue (pausing a paused queue changes nothing).
func (b *Broker) Pause(ctx context.Context, queue string) error {
	_, err := b.opsExec(ctx, "pause", b.opsSQL().pause, queue)
	return err
}

// Resume resumes queue (resuming a queue not paused changes nothing).
func (b *Broker) Resume(ctx context.Context, queue string) error {
	_, err := b.opsExec(ctx, "resume", b.opsSQL().resume, queue, b.channel)
	return err
}

// Paused returns the queues paused now, by name.
func (b *Broker) Paused(ctx context.Context) ([]string, error) {
	return opsRows(ctx, b, "list paused queues", b.opsSQL().paused, pgx.RowTo[string])
}

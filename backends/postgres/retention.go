package postgresbackend

import (
	"context"
	"time"
)

// retain runs the retention sweep every RetentionInterval until Close.
func (b *Backend) retain() {
	tick := time.NewTicker(b.opts.RetentionInterval)
	defer tick.Stop()
	for {
		select {
		case <-b.life.Done():
			return
		case <-tick.C:
		}
		if _, err := b.sweep(b.life, b.opts.RetentionBatch); err != nil && b.life.Err() == nil {
			b.logger.Warn("postgres backend: retention sweep failed; the next one tries again", "err", err)
		}
	}
}

// sweep removes expired rows: states past their result expiry, then the
// member rows of groups past their group expiry, then those groups, each
// in statements deleting at most batch rows (skipping rows a writer
// holds), until a statement finds fewer than batch. It returns how many
// rows each statement deleted, in order. Reads already treat an expired
// row as absent: the sweep only keeps the tables small.
func (b *Backend) sweep(ctx context.Context, batch int) ([]int64, error) {
	var counts []int64
	for _, q := range []string{b.q.sweepStates, b.q.sweepMembers, b.q.sweepGroups} {
		for {
			cctx, cancel := b.bound(ctx)
			tag, err := b.pool.Exec(cctx, q, batch)
			cancel()
			if err != nil {
				return counts, b.err(ctx, "retention sweep", err)
			}
			counts = append(counts, tag.RowsAffected())
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return counts, nil
}

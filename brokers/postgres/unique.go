package postgresbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

var _ driver.Uniquer = (*Broker)(nil)

// Uniqueness locks (driver.Uniquer): one row of unique_keys per key, its
// holder's task ID and when the lock runs out by the server's clock. Lock
// and Unlock are each one statement, through the caller's transaction
// when the ctx carries one (pgdb.WriterFor): a key taken in a transaction
// is held for others once it commits and free again if it rolls back;
// until it ends, another Lock of that key waits for it (the row's lock).

// lockSQL takes the key when it is free, expired or already the task's
// own (its ttl then starts again), and leaves it otherwise; either way it
// returns the holder. $1 key, $2 task ID, $3 ttl (ms).
const lockSQL = `
INSERT INTO {unique_keys} AS u (key, holder, expires_at)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET
	holder = CASE WHEN u.holder = excluded.holder OR u.expires_at <= clock_timestamp()
		THEN excluded.holder ELSE u.holder END,
	expires_at = CASE WHEN u.holder = excluded.holder OR u.expires_at <= clock_timestamp()
		THEN excluded.expires_at ELSE u.expires_at END
RETURNING holder`

// unlockSQL frees the key if the task holds it. $1 key, $2 task ID.
const unlockSQL = `DELETE FROM {unique_keys} WHERE key = $1 AND holder = $2`

// Lock takes key for id for ttl (at least 1ms) unless another task holds
// it, and returns the holder.
func (b *Broker) Lock(ctx context.Context, key, id string, ttl time.Duration) (string, error) {
	if ttl <= 0 {
		return "", fmt.Errorf("postgres broker: unique key %q: ttl %v, want > 0", key, ttl)
	}
	var holder string
	args := []any{key, id, max(ttl.Milliseconds(), 1)}
	if _, err := b.opsRow(ctx, pgdb.WriterFor(ctx, b.pool), "lock unique key", b.opsSQL().lock, args, &holder); err != nil {
		return "", err
	}
	if !pgdb.InTx(ctx) {
		b.maybeSweep(ctx)
	}
	return holder, nil
}

// Unlock frees key if id holds it.
func (b *Broker) Unlock(ctx context.Context, key, id string) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	bctx, cancel := b.bound(ctx)
	defer cancel()
	if _, err := pgdb.WriterFor(ctx, b.pool).Exec(bctx, b.opsSQL().unlock, key, id); err != nil {
		return b.fail(ctx, bctx, "unlock unique key", err)
	}
	return nil
}

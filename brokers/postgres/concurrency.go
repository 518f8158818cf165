package postgresbroker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.ConcurrencyLimiter = (*Broker)(nil)

// Concurrency limits (driver.ConcurrencyLimiter): a row of
// concurrency_slots per slot held (key, holder, when it lapses by the
// server's clock). Each method is one statement: Acquire calls the
// schema's function acquire_slots, which serializes the acquirers of a key
// on a transaction-scoped advisory lock (taken in key order: two
// acquirers never deadlock), deletes the key's lapsed slots, counts the
// others' and takes all of its keys or none; Renew pushes back the slots
// that have not lapsed and names the others; Free deletes. A Renew racing
// an Acquire of the same key is ordered by the row's lock: the Acquire's
// delete of a lapsed slot either waits for the renewal and keeps the slot,
// or deletes it first and the renewal finds nothing (lost). Lapsed rows
// left behind go with the broker's sweep.

// acquireSQL takes a slot of every key for a holder, all or none. $1
// holder, $2 keys, $3 their limits, $4 ttl (ms). Returns whether it did.
const acquireSQL = `SELECT {acquire_slots}($1, $2::text[], $3::int[], $4::bigint)`

// renewSQL renews a holder's slots of keys that have not lapsed. $1
// holder, $2 keys, $3 ttl (ms). Returns the keys not renewed (lapsed, or
// never held).
const renewSQL = `
WITH renewed AS (
	UPDATE {concurrency_slots} SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
	WHERE holder = $1 AND key = ANY($2::text[]) AND expires_at > clock_timestamp()
	RETURNING key
)
SELECT coalesce(array_agg(k ORDER BY k), ARRAY[]::text[]) FROM unnest($2::text[]) k
WHERE k NOT IN (SELECT key FROM renewed)`

// freeSQL gives a holder's slots of keys back. $1 holder, $2 keys.
const freeSQL = `DELETE FROM {concurrency_slots} WHERE holder = $1 AND key = ANY($2::text[])`

// Acquire takes a slot of every key of slots for holder, all or none (see
// driver.ConcurrencyLimiter).
func (b *Broker) Acquire(ctx context.Context, holder string, slots []driver.Slot, ttl time.Duration) (bool, error) {
	if len(slots) == 0 {
		return true, nil
	}
	keys, limits := make([]string, len(slots)), make([]int32, len(slots))
	for i, s := range slots {
		if s.Limit < 1 {
			return false, fmt.Errorf("postgres broker: concurrency limit %q: limit %d: want 1 or more", s.Key, s.Limit)
		}
		keys[i], limits[i] = s.Key, int32(min(s.Limit, 1<<31-1))
	}
	var ok bool
	args := []any{holder, keys, limits, max(ttl.Milliseconds(), 1)}
	if _, err := b.opsRow(ctx, pgxWriter(b), "acquire concurrency slots", b.opsSQL().acquire, args, &ok); err != nil {
		return false, err
	}
	b.maybeSweep(ctx)
	return ok, nil
}

// Renew renews holder's slots of keys for ttl; a lapsed one is not, and
// makes the answer an error wrapping driver.ErrLeaseLost.
func (b *Broker) Renew(ctx context.Context, holder string, keys []string, ttl time.Duration) error {
	if len(keys) == 0 {
		return nil
	}
	var lost []string
	args := []any{holder, keys, max(ttl.Milliseconds(), 1)}
	if _, err := b.opsRow(ctx, pgxWriter(b), "renew concurrency slots", b.opsSQL().renew, args, &lost); err != nil {
		return err
	}
	if len(lost) > 0 {
		return fmt.Errorf("postgres broker: concurrency slots %s of %q: %w", strings.Join(lost, ", "), holder, driver.ErrLeaseLost)
	}
	return nil
}

// Free gives holder's slots of keys back.
func (b *Broker) Free(ctx context.Context, holder string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := b.opsExec(ctx, "free concurrency slots", b.opsSQL().free, holder, keys)
	return err
}

package postgresbroker

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.RateLimiter = (*Broker)(nil)

// Rate limits (driver.RateLimiter): one row of rate_buckets per key, a
// token bucket on the server's clock (clock_timestamp, to the
// microsecond), taken from in one statement, so every worker of every
// process shares one bucket and one clock. The arithmetic is the Redis
// broker's take script's, in milliseconds:
//
//	tokens  held at ts, refilled by (now - ts) × rate, at most burst
//	next    when the next refused caller should come back: a refusal
//	        waits until max(next, when one token will be there), and
//	        moves next 1/rate later, so refused callers are spread
//	wait    the answer of the latest call (0: a token was taken)
//
// A key's first call inserts a full bucket less the token it takes.

// takeSQL takes a token of bucket $1 at rate $2 (tokens a second) and
// burst $3; returns the wait in ms (0: taken).
const takeSQL = `
INSERT INTO {rate_buckets} AS b (key, tokens, ts, next, wait, expires_at)
SELECT $1, $3::float8 - 1, p.now, 0, 0,
	clock_timestamp() + (1000 / $2::float8 + 1000) * interval '1 millisecond'
FROM (SELECT extract(epoch FROM clock_timestamp())::float8 * 1000 AS now) p
ON CONFLICT (key) DO UPDATE SET (tokens, ts, next, wait, expires_at) = (
	SELECT r.tokens, f.ts, r.next, r.wait,
		clock_timestamp() + (greatest(r.next - p.now, ($3::float8 - r.tokens) / p.rate) + 1000) * interval '1 millisecond'
	FROM (SELECT extract(epoch FROM clock_timestamp())::float8 * 1000 AS now, $2::float8 / 1000 AS rate) p
	CROSS JOIN LATERAL (SELECT least($3::float8, b.tokens + greatest(p.now - b.ts, 0) * p.rate) AS tokens,
		greatest(p.now, b.ts) AS ts) f
	CROSS JOIN LATERAL (SELECT f.tokens >= 1 - 1e-9 AS ok,
		greatest(b.next, p.now + (1 - f.tokens) / p.rate) AS due) g
	CROSS JOIN LATERAL (SELECT
		CASE WHEN g.ok THEN f.tokens - 1 ELSE f.tokens END AS tokens,
		CASE WHEN g.ok THEN b.next ELSE g.due + 1 / p.rate END AS next,
		CASE WHEN g.ok THEN 0 ELSE g.due - p.now END AS wait) r
)
RETURNING wait`

// Take takes a token from the bucket key (see driver.RateLimiter).
func (b *Broker) Take(ctx context.Context, key string, rate float64, burst int) (time.Duration, error) {
	if !(rate > 0) || math.IsInf(rate, 0) || burst < 1 {
		return 0, fmt.Errorf("postgres broker: rate limit %q: rate %v and burst %d: want rate > 0 and burst >= 1", key, rate, burst)
	}
	var ms float64
	if _, err := b.opsRow(ctx, pgxWriter(b), "take rate limit token", b.opsSQL().take, []any{key, rate, float64(burst)}, &ms); err != nil {
		return 0, err
	}
	b.maybeSweep(ctx)
	if ms <= 0 {
		return 0, nil
	}
	return max(time.Microsecond, time.Duration(math.Ceil(ms*1000))*time.Microsecond), nil
}

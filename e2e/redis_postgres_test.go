package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// TestRedisBrokerWithPostgresBackend runs the worker cases of the kit on
// the Redis broker with the PostgreSQL result backend (issue 33: a
// required pairing). The two are not co-located (the broker understands
// only a Redis backend's location): every call takes the portable path.
func TestRedisBrokerWithPostgresBackend(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t)
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	const prefix = "errand-e2e-pg"
	broker := conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{MaxPayload: redisbroker.DefaultMaxPayload, OrderedByETA: true, Priority: true, DetectsLostLease: true, Durable: true, Purge: true, Stats: true,
			Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true, Schedules: true,
			Unique: true, RateLimit: true, Colocate: true},
		Timing: conformance.Timing{Lease: 300 * time.Millisecond, Delay: 300 * time.Millisecond, DelayBound: 100 * time.Millisecond},
		PushRaw: func(t testing.TB, _ errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			if err := rdb.LPush(context.Background(), "{"+prefix+":"+queue+"}:pending", raw).Err(); err != nil {
				t.Fatalf("PushRaw: LPUSH onto the pending list: %v", err)
			}
			return true
		},
	}
	backend := conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b, err := postgresbackend.New(context.Background(), pool, &postgresbackend.Options{Schema: schema, ResultExpiry: expiry})
			if err != nil {
				t.Fatalf("postgresbackend.New: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Waiter: true,
			Start: true, PendingIfAbsent: true, Located: true, Tx: true},
	}
	conformance.RunWorker(t, broker, backend)
}

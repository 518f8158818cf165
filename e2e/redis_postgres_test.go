package e2e_test

import (
	"testing"

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
	conformance.RunWorker(t, redisBrokerHarness(rdb, "errand-e2e-pg"), postgresBackendHarness(pool, schema))
}

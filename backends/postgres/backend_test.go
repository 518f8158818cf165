package postgresbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// harness makes backends on pool in a schema of t's own (migrated, dropped
// when t ends); opts, if not nil, is the base of each backend's Options.
func harness(t testing.TB, pool *pgxpool.Pool, opts *postgresbackend.Options) conformance.BackendHarness {
	schema := pgdbtest.Schema(t, pool)
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			o := postgresbackend.Options{}
			if opts != nil {
				o = *opts
			}
			o.Schema, o.ResultExpiry = schema, expiry
			b, err := postgresbackend.New(context.Background(), pool, &o)
			if err != nil {
				t.Fatalf("postgresbackend.New: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		// Durable: every state and group is a committed row
		// (TestServerRestart). Tx: checked with a broker whose BeginTx
		// opens a pgx.Tx (the PostgreSQL broker's harness); the memory
		// broker's transaction is refused, and TestTx checks the backend's
		// writes inside a pgx.Tx and a *sql.Tx.
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Waiter: true,
			Start: true, PendingIfAbsent: true, Located: true, Tx: true, Cancel: true},
	}
}

func TestConformance(t *testing.T) {
	conformance.RunBackend(t, harness(t, pgdbtest.Pool(t), nil))
}

// TestWorker: the memory broker with this backend.
func TestWorker(t *testing.T) {
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), harness(t, pgdbtest.Pool(t), nil))
}

// locSchema is the schema of a backend's Location.
func locSchema(t testing.TB, loc any) string {
	t.Helper()
	l, ok := loc.(*pgdb.Location)
	if !ok {
		t.Fatalf("Location() = %T, want a *pgdb.Location", loc)
	}
	return l.Schema
}

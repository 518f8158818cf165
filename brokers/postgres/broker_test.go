package postgresbroker_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// harness is the broker's conformance harness on pool, in a migrated
// schema of its own (one per harness: cases use queues of their own).
func harness(t testing.TB, pool *pgxpool.Pool) conformance.BrokerHarness {
	return harnessIn(pool, pgdbtest.Schema(t, pool))
}

// harnessIn is the harness on pool's schema.
func harnessIn(pool *pgxpool.Pool, schema string) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b, err := postgresbroker.New(context.Background(), pool, &postgresbroker.Options{Schema: schema})
			if err != nil {
				t.Fatalf("postgresbroker.New: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: withOpsCaps(conformance.BrokerCaps{MaxPayload: postgresbroker.DefaultMaxPayload, OrderedByETA: true, Priority: true,
			DetectsLostLease: true, Durable: true, Tx: true, Colocate: true, CancelNotify: true}),
		Timing: conformance.Timing{Lease: 300 * time.Millisecond, Delay: 300 * time.Millisecond, DelayBound: 100 * time.Millisecond},
		// Foreign bytes go where another program would put them: a row of
		// the messages table, inserted with SQL.
		PushRaw: func(t testing.TB, _ errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			_, err := pool.Exec(context.Background(), "INSERT INTO "+pgdb.Table(schema, "messages")+
				" (queue, msg_id, body, eta, ready, due) VALUES ($1, $2, $3, now(), true, now())",
				queue, fmt.Sprintf("raw-%d", time.Now().UnixNano()), raw)
			if err != nil {
				t.Fatalf("PushRaw: insert into the messages table: %v", err)
			}
			return true
		},
		BeginTx: func(t testing.TB, _ errand.Broker) (any, func() error, func() error) {
			t.Helper()
			tx, err := pool.Begin(context.Background())
			if err != nil {
				t.Fatalf("BeginTx: %v", err)
			}
			return tx, func() error { return tx.Commit(context.Background()) }, func() error { return tx.Rollback(context.Background()) }
		},
	}
}

func TestConformance(t *testing.T) {
	pool := pgdbtest.Pool(t)
	h := harness(t, pool)
	conformance.RunBroker(t, h)
	conformance.RunWorker(t, h, conformance.MemoryBackend())
}

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

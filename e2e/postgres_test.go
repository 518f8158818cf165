package e2e_test

// The PostgreSQL broker and the PostgreSQL backend, together on one
// database and schema (co-located: driver.Colocator, one statement per
// send, start and settle), and the PostgreSQL broker with the Redis
// backend (the Redis broker with the PostgreSQL backend:
// redis_postgres_test.go).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	redisbackend "github.com/errand-go/errand/backends/redis"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// postgresBrokerHarness is the PostgreSQL broker's harness on pool's
// schema: every capability it declares in its own module's tests, and
// transactions (BeginTx: a pgx.Tx of pool).
func postgresBrokerHarness(pool *pgxpool.Pool, schema string) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b, err := postgresbroker.New(context.Background(), pool, &postgresbroker.Options{Schema: schema})
			if err != nil {
				t.Fatalf("postgresbroker.New: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{MaxPayload: postgresbroker.DefaultMaxPayload, OrderedByETA: true, Priority: true,
			DetectsLostLease: true, Durable: true, Tx: true, Colocate: true, CancelNotify: true,
			Purge: true, Stats: true, Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true,
			Unique: true, RateLimit: true, Schedules: true},
		Timing: conformance.Timing{Lease: 300 * time.Millisecond, Delay: 300 * time.Millisecond, DelayBound: 100 * time.Millisecond},
		PushRaw: func(t testing.TB, _ errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			_, err := pool.Exec(context.Background(), "INSERT INTO "+pgx.Identifier{schema, "messages"}.Sanitize()+
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

// postgresBackendHarness is the PostgreSQL backend's harness on pool's
// schema.
func postgresBackendHarness(pool *pgxpool.Pool, schema string) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b, err := postgresbackend.New(context.Background(), pool, &postgresbackend.Options{Schema: schema, ResultExpiry: expiry})
			if err != nil {
				t.Fatalf("postgresbackend.New: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Waiter: true,
			Start: true, PendingIfAbsent: true, Located: true, Tx: true, Cancel: true},
	}
}

// colocatedHarnesses are the two harnesses on one schema of pool, after
// checking that the broker co-locates with the backend there.
func colocatedHarnesses(t *testing.T, pool *pgxpool.Pool) (conformance.BrokerHarness, conformance.BackendHarness) {
	schema := pgdbtest.Schema(t, pool)
	broker, backend := postgresBrokerHarness(pool, schema), postgresBackendHarness(pool, schema)
	if broker.New(t).(driver.Colocator).Colocate(backend.New(t, 0)) == nil {
		t.Fatalf("co-location promise broken: the PostgreSQL broker's Colocate answered nil for the PostgreSQL backend on its own pool and schema; want its one-statement calls (driver.Colocator)")
	}
	return broker, backend
}

// TestPostgresBrokerWithPostgresBackend runs the end-to-end cases on the
// PostgreSQL broker and backend on one pool and schema: co-located, so
// the Worker/Colocation cases check the broker's one-statement calls, and
// the Worker/Tx cases a send of tasks, chains, groups and chords inside a
// pgx.Tx with their states.
func TestPostgresBrokerWithPostgresBackend(t *testing.T) {
	t.Parallel()
	broker, backend := colocatedHarnesses(t, pgdbtest.Pool(t))
	conformance.RunWorker(t, broker, backend)
}

// TestPostgresBrokerWithPostgresBackendServerRestart restarts the private
// PostgreSQL both drivers share (a fast shutdown: every session ended)
// while a chord and plain tasks run through the co-located calls: both
// declare Durable, so every result and the chord's callback arrive.
func TestPostgresBrokerWithPostgresBackendServerRestart(t *testing.T) {
	t.Parallel()
	u, server := pgdbtest.PrivateServer(t)
	broker, backend := colocatedHarnesses(t, pgdbtest.Connect(t, u))
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   broker,
		Backend:  backend,
		Restarts: conformance.RestartsBroker | conformance.RestartsBackend,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

// TestPostgresBrokerWithRedisBackend: the PostgreSQL broker with the Redis
// result backend (not co-located: Colocate answers nil, the portable
// path).
func TestPostgresBrokerWithRedisBackend(t *testing.T) {
	t.Parallel()
	pool := pgdbtest.Pool(t)
	rdb := redisClient(t)
	broker := postgresBrokerHarness(pool, pgdbtest.Schema(t, pool))
	backend := conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-e2e-pg", ResultExpiry: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Start: true, PendingIfAbsent: true, Located: true, Cancel: true},
	}
	conformance.RunWorker(t, broker, backend)
}

// statementCounter counts the statements run on the connections of a pool
// it traces (pgx.QueryTracer): the calls' own, the broker's listener's and
// its notifications alike.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestPostgresColocatedStatements runs 200 tasks through a Server on the
// PostgreSQL broker and backend, co-located (one schema) and not (the
// backend in a schema of its own: Colocate answers nil), and counts the
// statements each run sends: co-location must take fewer (one statement
// instead of two for each send, fetch-and-start and settle), and every
// task must run once and end SUCCESS either way. The counts per task are
// logged (docs/postgres.md quotes them).
func TestPostgresColocatedStatements(t *testing.T) {
	t.Parallel()
	shared := pgdbtest.Pool(t)
	cfg := shared.Config()
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const n = 200
	run := func(brokerSchema, backendSchema string) (statements int64, colocated bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		br, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: brokerSchema})
		if err != nil {
			t.Fatal(err)
		}
		defer br.Close()
		be, err := postgresbackend.New(ctx, pool, &postgresbackend.Options{Schema: backendSchema})
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		colocated = br.Colocate(be) != nil
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be, DefaultQueue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		var mu sync.Mutex
		runs := map[int]int{}
		if err := srv.Register("count", func(i int) (int, error) {
			mu.Lock()
			runs[i]++
			mu.Unlock()
			return i, nil
		}); err != nil {
			t.Fatal(err)
		}
		before := counter.n.Load()
		var results []*errand.AsyncResult
		for i := range n {
			r, err := srv.SendTask(ctx, errand.NewSignature("count", i))
			if err != nil {
				t.Fatalf("SendTask %d: %v", i, err)
			}
			results = append(results, r)
		}
		w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4})
		w.Start()
		defer w.Shutdown(context.Background())
		// Done once the last task's state is SUCCESS, read from the
		// table: a waiter's reads would be counted with the run's.
		last := results[n-1].Signature.UUID
		for {
			var state string
			err := shared.QueryRow(ctx, "SELECT state FROM "+pgx.Identifier{backendSchema, "states"}.Sanitize()+" WHERE id = $1", last).Scan(&state)
			if err == nil && state == string(errand.StateSuccess) {
				ok := true
				for _, r := range results {
					if err := shared.QueryRow(ctx, "SELECT state FROM "+pgx.Identifier{backendSchema, "states"}.Sanitize()+" WHERE id = $1", r.Signature.UUID).Scan(&state); err != nil || state != string(errand.StateSuccess) {
						ok = false
						break
					}
				}
				if ok {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("the %d tasks did not all end SUCCESS within the test's bound", n)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond): // a poll of the table, not a wait for an event
			}
		}
		statements = counter.n.Load() - before
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			if runs[i] != 1 {
				t.Errorf("task %d ran %d times; want once", i, runs[i])
			}
		}
		return statements, colocated
	}
	schema := pgdbtest.Schema(t, shared)
	together, coloc := run(schema, schema)
	apart, notColoc := run(pgdbtest.Schema(t, shared), pgdbtest.Schema(t, shared))
	if !coloc || notColoc {
		t.Fatalf("Colocate answered calls: %v on one schema, %v on two; want true, false", coloc, notColoc)
	}
	t.Logf("statements per task (send, fetch, start, settle, and the workers' waits): co-located %.2f, apart %.2f (%d tasks)", float64(together)/n, float64(apart)/n, n)
	if together >= apart {
		t.Errorf("co-location promise broken: %d tasks took %d statements co-located and %d apart; want fewer co-located (one statement per send, fetch-and-start and settle)", n, together, apart)
	}
}

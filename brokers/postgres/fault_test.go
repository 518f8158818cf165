package postgresbroker_test

// The kit's fault scenarios on real processes: a worker process SIGKILLed
// mid-task (on the shared server), a private PostgreSQL restarted
// mid-chord under running workers, and a silent server (a stalled proxy
// in front of the shared server).

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// workerSchemaEnv carries TestWorkerKilled's schema to the worker
// processes the kit starts (they re-run the test binary, and must reach
// the parent's queue).
const workerSchemaEnv = "ERRAND_TEST_PGBROKER_WORKER_SCHEMA"

// TestWorkerKilled re-runs this test binary as worker processes (see
// conformance.RunWorkerKilled): everything here runs in them too, where
// the schema the parent made is found in the environment.
func TestWorkerKilled(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := os.Getenv(workerSchemaEnv)
	if schema == "" {
		schema = pgdbtest.Schema(t, pool)
		t.Setenv(workerSchemaEnv, schema)
	}
	conformance.RunWorkerKilled(t, harnessIn(pool, schema))
}

// TestServerRestart restarts a private PostgreSQL (a fast shutdown: every
// session ended) while tasks run: the broker declares Durable, so nothing
// may be lost, and its pool's and listener's connections killed by the
// restart must be replaced.
func TestServerRestart(t *testing.T) {
	u, server := pgdbtest.PrivateServer(t)
	pool := pgdbtest.Connect(t, u)
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   harness(t, pool),
		Backend:  conformance.MemoryBackend(),
		Restarts: conformance.RestartsBroker,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

// silentCallTimeout is the broker's CallTimeout in the silent-server
// tests.
const silentCallTimeout = 2 * time.Second

// silentTarget returns the shared server's host:port and a schema of
// the test's own on it.
func silentTarget(t *testing.T) (*url.URL, string) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	u, err := url.Parse(pgdbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	return u, schema
}

// viaProxy returns u's URL with its host replaced by addr.
func viaProxy(u *url.URL, addr string) string {
	p := *u
	p.Host = addr
	return p.String()
}

func proxiedBroker(t testing.TB, u *url.URL, schema, addr string, opts postgresbroker.Options) errand.Broker {
	pool, err := pgxpool.New(context.Background(), viaProxy(u, addr))
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	opts.Schema = schema
	b, err := postgresbroker.New(context.Background(), pool, &opts)
	if err != nil {
		t.Fatalf("postgresbroker.New through the proxy: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestSilentServer: with PostgreSQL accepting connections but never
// answering (a stalled proxy), every broker call and OpenBroker return an
// error by the caller's ctx deadline, or without one within CallTimeout.
func TestSilentServer(t *testing.T) {
	u, schema := silentTarget(t)
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: u.Host,
		Broker: func(t testing.TB, addr string) errand.Broker {
			return proxiedBroker(t, u, schema, addr, postgresbroker.Options{CallTimeout: silentCallTimeout})
		},
		BrokerURL: func(addr string) string {
			return viaProxy(u, addr) + fmt.Sprintf("?schema=%s&timeout=%v", schema, silentCallTimeout)
		},
		CallTimeout: silentCallTimeout,
	})
}

// TestShutdownSilentServer: a worker's Shutdown returns by its deadline
// while the server is silent, and its tasks are completed by another
// worker once it answers again.
func TestShutdownSilentServer(t *testing.T) {
	u, schema := silentTarget(t)
	conformance.RunShutdownSilentServer(t, conformance.SilentServerHarness{
		Target: u.Host,
		Broker: func(t testing.TB, addr string) errand.Broker {
			return proxiedBroker(t, u, schema, addr, postgresbroker.Options{CallTimeout: silentCallTimeout})
		},
	})
}

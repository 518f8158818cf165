package postgresbackend_test

// Faults: PostgreSQL restarted mid-chord, a silent server, a statement
// cancelled by statement_timeout, a pool with no free connection.

import (
	"context"
	"errors"
	"net/url"
	"strings"
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

// TestServerRestart: the kit's restart scenario on a private server
// stopped (a fast shutdown) while a chord's members run: states, group
// counts and chord claims are committed rows, so the chord completes with
// every member's result.
func TestServerRestart(t *testing.T) {
	u, server := pgdbtest.PrivateServer(t)
	pool := pgdbtest.Connect(t, u)
	conformance.RunServerRestart(t, conformance.RestartHarness{
		Broker:   conformance.MemoryBroker(memorybroker.Options{}),
		Backend:  harness(t, pool, nil),
		Restarts: conformance.RestartsBackend,
		Stop:     server.Stop,
		Start:    server.Start,
	})
}

// silentCallTimeout is the backends' CallTimeout in TestSilentServer.
const silentCallTimeout = 2 * time.Second

// TestSilentServer: with the server accepting connections but answering
// nothing (a stalled proxy in front of the shared server), every backend
// call and OpenBackend return an error by the caller's ctx deadline, or
// within CallTimeout without one.
func TestSilentServer(t *testing.T) {
	direct := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, direct)
	u, err := url.Parse(pgdbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	withHost := func(addr string) *url.URL {
		v := *u
		v.Host = addr
		return &v
	}
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: u.Host,
		Backend: func(t testing.TB, addr string) errand.Backend {
			pool, err := pgxpool.New(context.Background(), withHost(addr).String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			b, err := postgresbackend.New(context.Background(), pool, &postgresbackend.Options{Schema: schema, CallTimeout: silentCallTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		BackendURL: func(addr string) string {
			v := withHost(addr)
			q := v.Query()
			q.Set("schema", schema)
			q.Set("timeout", silentCallTimeout.String())
			v.RawQuery = q.Encode()
			return v.String()
		},
		CallTimeout: silentCallTimeout,
	})
}

// A statement the server cancels at its statement_timeout (a chord claim
// waiting on a group row another transaction holds) is reported as such,
// not as a vague failure.
func TestStatementTimeoutReported(t *testing.T) {
	ctx := context.Background()
	direct := pgdbtest.Pool(t)
	h := harness(t, direct, nil)
	cfg := direct.Config().Copy()
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "200"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	owner := h.New(t, 0)
	if err := owner.InitGroup(ctx, "g-timeout", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	loc := owner.(interface{ Location() any }).Location()
	schema := locSchema(t, loc)
	b, err := postgresbackend.New(ctx, pool, &postgresbackend.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tx, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgdb.Table(schema, "groups")+" WHERE id = 'g-timeout' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	_, err = b.ClaimChord(ctx, "g-timeout", "x")
	if err == nil || !strings.Contains(err.Error(), "statement_timeout") {
		t.Fatalf("ClaimChord blocked past the server's statement_timeout returned %v; want an error naming statement_timeout", err)
	}
}

// A call that finds every connection of the pool in use until its ctx
// ends says so.
func TestFullPoolReported(t *testing.T) {
	ctx := context.Background()
	direct := pgdbtest.Pool(t)
	h := harness(t, direct, nil)
	schema := locSchema(t, h.New(t, 0).(interface{ Location() any }).Location())
	cfg := direct.Config().Copy()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := postgresbackend.New(ctx, pool, &postgresbackend.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.GetState(cctx, "any")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no free connection in the pool") {
		t.Fatalf("GetState with the pool's only connection held returned %v; want an error naming the full pool, satisfying errors.Is(err, context.DeadlineExceeded)", err)
	}
}

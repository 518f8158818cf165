package postgresbroker_test

// Faults the kit does not stage: statement_timeout, a full pool, and the
// broker's connections killed under it (the pool and the listener
// recover).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// poolWith returns a pool on the shared server configured by edit.
func poolWith(t *testing.T, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgdbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestStatementTimeout: a statement statement_timeout cancels (here a
// publish waiting on a table lock another session holds) fails with
// ErrStatementTimeout, and nothing is published.
func TestStatementTimeout(t *testing.T) {
	shared := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, shared)
	pool := poolWith(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["statement_timeout"] = "200ms" })
	b := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	ctx := context.Background()
	q := "st-" + t.Name()

	lock, err := shared.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "LOCK TABLE "+pgdb.Table(schema, "messages")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	err = b.Publish(ctx, driver.Message{ID: "blocked", Queue: q, Body: []byte("x")})
	if !errors.Is(err, postgresbroker.ErrStatementTimeout) {
		t.Fatalf("Publish against a locked table with statement_timeout 200ms = %v, want an error satisfying errors.Is(err, ErrStatementTimeout)", err)
	}
	t.Logf("the error: %v", err)
	lock.Rollback(ctx)
	fctx, cancel := context.WithTimeout(ctx, scaled(300*time.Millisecond))
	defer cancel()
	if ds, err := b.Fetch(fctx, q, 1, time.Minute); len(ds) != 0 {
		t.Fatalf("a publish canceled by statement_timeout left %d messages (%v)", len(ds), err)
	}
}

// TestPoolFull: with every connection of the pool held elsewhere, calls
// fail with ErrPoolFull once their bound passes (CallTimeout, or the
// ctx's deadline), and work again once a connection comes free.
func TestPoolFull(t *testing.T) {
	shared := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, shared)
	pool := poolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	b := newBroker(t, pool, schema, postgresbroker.Options{CallTimeout: 300 * time.Millisecond, PollInterval: noPoll})
	ctx := context.Background()
	q := "full-" + t.Name()
	m := driver.Message{ID: "m", Queue: q, Body: []byte("x")}

	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, m); !errors.Is(err, postgresbroker.ErrPoolFull) {
		held.Release()
		t.Fatalf("Publish with the pool's one connection held = %v, want ErrPoolFull", err)
	} else {
		t.Logf("the error: %v", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = b.Fetch(fctx, q, 1, time.Minute)
	cancel()
	if !errors.Is(err, postgresbroker.ErrPoolFull) || !errors.Is(err, context.DeadlineExceeded) {
		held.Release()
		t.Fatalf("Fetch with a deadline and the pool's one connection held = %v, want ErrPoolFull wrapping the ctx's error", err)
	}
	held.Release()
	if err := b.Publish(ctx, m); err != nil {
		t.Fatalf("Publish once the connection is free: %v", err)
	}
	fctx, cancel = context.WithTimeout(ctx, wakeBound())
	defer cancel()
	if ds, err := b.Fetch(fctx, q, 1, time.Minute); len(ds) != 1 {
		t.Fatalf("Fetch once the connection is free: %d deliveries, %v", len(ds), err)
	}
}

// TestConnectionsKilled: every connection of a broker (its pool's and
// its listener's) is terminated by the server while a Fetch waits; the
// Fetch still returns a message published afterwards, woken by its
// NOTIFY (polling is off): the listener listens again and the pool's
// dead connections are replaced.
func TestConnectionsKilled(t *testing.T) {
	shared := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, shared)
	app := fmt.Sprintf("errand-killed-%d", time.Now().UnixNano())
	pool := poolWith(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
	consumer := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	producer := newBroker(t, shared, schema, postgresbroker.Options{PollInterval: noPoll})
	ctx := context.Background()
	q := "killed-" + t.Name()

	// The pool holds idle connections to kill: a fetch that finds a
	// message, and the listener.
	if err := producer.Publish(ctx, driver.Message{ID: "before", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, wakeBound())
	ds, err := consumer.Fetch(fctx, q, 1, time.Minute)
	cancel()
	if len(ds) != 1 {
		t.Fatalf("Fetch before the kill: %d deliveries, %v", len(ds), err)
	}
	consumer.Ack(ctx, ds)

	ch := blockedFetch(ctx, consumer, q)
	var killed int
	if err := shared.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed < 2 {
		t.Fatalf("terminated %d of the broker's connections, want its pool's and its listener's (2 or more)", killed)
	}
	// The listener listens again before the publish counts: wait until
	// the server shows its new session listening.
	deadline := time.Now().Add(wakeBound())
	for {
		var n int
		shared.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'", app).Scan(&n)
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener did not listen again within %v of its connection's termination", wakeBound())
		}
		timer := time.NewTimer(10 * time.Millisecond)
		<-timer.C
	}
	if err := producer.Publish(ctx, driver.Message{ID: "after", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	f := awaitFetch(t, ch, "publish after the broker's connections were terminated")
	if len(f.ds) != 1 || f.ds[0].ID != "after" {
		t.Fatalf("Fetch returned %d deliveries, want after", len(f.ds))
	}
	if errs := consumer.Ack(ctx, f.ds); errs != nil {
		t.Fatalf("Ack: %v", errs)
	}
}

// TestQueueNameTooLong: a queue name too long for a NOTIFY payload is
// refused before anything of the batch is written, with an error saying
// so.
func TestQueueNameTooLong(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b := newBroker(t, pool, schema, postgresbroker.Options{})
	ctx := context.Background()
	long := strings.Repeat("q", 8000)
	err := b.Publish(ctx, driver.Message{ID: "ok", Queue: "short", Body: []byte("x")}, driver.Message{ID: "long", Queue: long, Body: []byte("x")})
	if err == nil || !strings.Contains(err.Error(), "queue name") {
		t.Fatalf("Publish to a queue named with 8000 bytes = %v, want an error naming the queue name's length", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgdb.Table(schema, "messages")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a refused batch left %d messages (%v), want none", n, err)
	}
}

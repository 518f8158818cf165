package postgresbroker_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/errand-go/errand"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// withQuery returns u with the query parameters q added.
func withQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

// TestOpenByURL: both schemes open a broker on the URL's schema, with
// pgx's own parameters passed through; a schema that was never migrated
// is refused with ErrNoSchema.
func TestOpenByURL(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	ctx := context.Background()
	base := pgdbtest.URL(t)
	for _, scheme := range []string{"postgres", "postgresql"} {
		u := scheme + base[strings.Index(base, "://"):]
		b, err := errand.OpenBroker(ctx, withQuery(u, "schema="+schema+"&timeout=5s&poll_interval=2s&max_payload=1000&pool_max_conns=2"))
		if err != nil {
			t.Fatalf("OpenBroker(%s): %v", scheme, err)
		}
		if got := b.(driver.Limiter).Limits().MaxPayload; got != 1000 {
			t.Errorf("max_payload=1000 gave MaxPayload %d", got)
		}
		q := "url-" + scheme
		if err := b.Publish(ctx, errand.Message{ID: "m", Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, wakeBound())
		ds, err := b.Fetch(fctx, q, 1, time.Minute)
		cancel()
		if err != nil || len(ds) != 1 || ds[0].ID != "m" {
			t.Fatalf("fetch through a URL-opened broker: %v, %v", ds, err)
		}
		if errs := b.Ack(ctx, ds); errs != nil {
			t.Fatalf("Ack: %v", errs)
		}
		b.Close()
	}
	_, err := errand.OpenBroker(ctx, withQuery(base, "schema="+schema+"_never_made"))
	if !errors.Is(err, postgresbroker.ErrNoSchema) {
		t.Fatalf("OpenBroker on a schema never migrated = %v, want ErrNoSchema", err)
	}
	_, err = errand.OpenBroker(ctx, withQuery(base, "timeout=soon"))
	if err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("OpenBroker with timeout=soon = %v, want an error naming the parameter", err)
	}
}

// TestOpenErrorsHideCredentials: passwords stay out of open errors. Port
// 1 refuses.
func TestOpenErrorsHideCredentials(t *testing.T) {
	conformance.RunOpenRedaction(t, "broker", map[string][]string{
		"postgres://alice:hunter2@127.0.0.1:1/errand":                     {"hunter2"},
		"postgresql://alice:p%40ss%2Fhunter2@127.0.0.1:1/errand":          {"p@ss/hunter2", "p%40ss%2Fhunter2"},
		"postgres://alice@127.0.0.1:1/errand?password=hunter2":            {"hunter2"},
		"postgres://alice:hunter2@127.0.0.1:1/errand?timeout=soon":        {"hunter2"},
		"postgres://alice:hunter2@127.0.0.1:1/errand?pool_max_conns=many": {"hunter2"},
	})
}

// TestPublishInSQLTx: a publish inside a database/sql transaction (pgx's
// stdlib driver) exists only once it commits, and a rolled-back one
// leaves nothing.
func TestPublishInSQLTx(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	db, err := sql.Open("pgx", pgdbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	q := "sqltx-" + t.Name()
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CheckTx(tx); err != nil {
			t.Fatalf("CheckTx(*sql.Tx): %v", err)
		}
		msgs := []driver.Message{
			{ID: "a", Queue: q, Body: []byte("x"), Priority: 3, Task: "t", TaskAttempt: 1},
			{ID: "b", Queue: q, Body: []byte("y"), NotBefore: time.Now().Add(-time.Second)},
		}
		if err := b.Publish(driver.WithTx(ctx, tx), msgs...); err != nil {
			tx.Rollback()
			t.Fatalf("Publish in a *sql.Tx: %v", err)
		}
		fctx, cancel := context.WithTimeout(ctx, scaled(200*time.Millisecond))
		ds, _ := b.Fetch(fctx, q, 2, time.Minute)
		cancel()
		if len(ds) != 0 {
			tx.Rollback()
			t.Fatalf("transaction promise broken: %d messages of an uncommitted *sql.Tx were fetched", len(ds))
		}
		if !commit {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		fctx, cancel = context.WithTimeout(ctx, wakeBound())
		ds, err = b.Fetch(fctx, q, 10, time.Minute)
		cancel()
		if err != nil || len(ds) != 2 || ds[0].ID != "a" || ds[0].Task != "t" || ds[0].TaskAttempt != 1 || ds[0].Priority != 3 {
			t.Fatalf("after the commit (and a rollback before it): fetched %d deliveries (%v), want exactly a then b, a with its task, attempt and priority", len(ds), err)
		}
		b.Ack(ctx, ds)
	}
}

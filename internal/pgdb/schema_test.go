package pgdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

func TestMigrateThenCheck(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.EmptySchema(t, pool)
	if err := pgdb.Check(ctx, pool, schema); !errors.Is(err, pgdb.ErrNoSchema) {
		t.Fatalf("Check before Migrate = %v, want ErrNoSchema", err)
	}
	errs := make(chan error, 3)
	for range 3 { // concurrent Migrate calls apply each step once
		go func() { errs <- pgdb.Migrate(ctx, pool, schema) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if err := pgdb.Check(ctx, pool, schema); err != nil {
		t.Fatalf("Check after Migrate = %v, want nil", err)
	}
	var n int
	pool.QueryRow(ctx, "SELECT count(*) FROM "+pgdb.Table(schema, "schema_version")).Scan(&n)
	if n != pgdb.Version {
		t.Fatalf("schema_version has %d rows after 3 Migrate calls, want %d (one per step)", n, pgdb.Version)
	}
	// A schema from a newer build is refused, never downgraded.
	pool.Exec(ctx, "INSERT INTO "+pgdb.Table(schema, "schema_version")+" (version) VALUES ($1)", pgdb.Version+1)
	if err := pgdb.Check(ctx, pool, schema); !errors.Is(err, pgdb.ErrSchemaNew) {
		t.Fatalf("Check of a newer schema = %v, want ErrSchemaNew", err)
	}
	if err := pgdb.Migrate(ctx, pool, schema); !errors.Is(err, pgdb.ErrSchemaNew) {
		t.Fatalf("Migrate of a newer schema = %v, want ErrSchemaNew", err)
	}
}

func TestVersionIsMigrationCount(t *testing.T) {
	if n := pgdb.MigrationCount(); n != pgdb.Version {
		t.Fatalf("Version = %d but there are %d migrations", pgdb.Version, n)
	}
}

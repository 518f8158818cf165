package pgdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Version is the schema version this build of the drivers reads and writes.
const Version = 1 // len(migrations), checked by TestVersionIsMigrationCount

// migrations[i] brings a schema from version i to version i+1: the SQL
// for schema (already quoted where it is used, through Table). Each step
// runs in the transaction Migrate holds, so a step is all or nothing. A
// released step is never edited: a change is a new step.
var migrations = []func(schema string) string{
	func(s string) string { return brokerV1(s) + brokerOpsV1(s) + backendV1(s) },
}

// Errors Check and Migrate answer with, wrapped in a *SchemaError.
var (
	// ErrNoSchema: the schema has no errand tables yet.
	ErrNoSchema = errors.New("no errand schema: create it with errand migrate or the driver's Migrate")
	// ErrSchemaOld: the schema is at an older version than this build's.
	ErrSchemaOld = errors.New("errand schema is older than this build: run errand migrate or the driver's Migrate")
	// ErrSchemaNew: the schema is at a newer version than this build's;
	// Migrate never downgrades it.
	ErrSchemaNew = errors.New("errand schema is newer than this build: upgrade errand")
)

// SchemaError says which schema is at which version, and what this build
// wants.
type SchemaError struct {
	Schema     string
	Have, Want int
	Err        error // ErrNoSchema, ErrSchemaOld or ErrSchemaNew
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("schema %q at version %d, this build uses %d: %v", e.Schema, e.Have, e.Want, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Check returns nil when schema is at Version, else a *SchemaError (or
// the error that kept it from reading the version). It reads one row.
func Check(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	have, err := version(ctx, pool, schema)
	if err != nil {
		return err
	}
	return versionErr(schema, have)
}

func versionErr(schema string, have int) error {
	switch {
	case have == 0:
		return &SchemaError{Schema: schema, Have: have, Want: Version, Err: ErrNoSchema}
	case have < Version:
		return &SchemaError{Schema: schema, Have: have, Want: Version, Err: ErrSchemaOld}
	case have > Version:
		return &SchemaError{Schema: schema, Have: have, Want: Version, Err: ErrSchemaNew}
	}
	return nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// version reads schema's version: 0 when it has none.
func version(ctx context.Context, q querier, schema string) (int, error) {
	var v *int32
	err := q.QueryRow(ctx, "SELECT max(version) FROM "+Table(schema, "schema_version")).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined_table, invalid_schema_name
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version of %q: %w", schema, err)
	}
	if v == nil {
		return 0, nil
	}
	return int(*v), nil
}

// DefaultSchema is the schema both drivers keep their tables in when
// their Options name none.
const DefaultSchema = "errand"

// Migrate brings schema (DefaultSchema when empty) to Version, creating
// it when missing, in one transaction holding an advisory lock
// (concurrent Migrate calls apply each step once). A schema newer than
// Version is left alone and answered with ErrSchemaNew.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if schema == "" {
		schema = DefaultSchema
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "errand-migrate:"+schema); err != nil {
			return fmt.Errorf("migrate %q: lock: %w", schema, err)
		}
		ddl := "CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize() + ";\n" +
			"CREATE TABLE IF NOT EXISTS " + Table(schema, "schema_version") +
			" (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("migrate %q: %w", schema, err)
		}
		have, err := version(ctx, tx, schema)
		if err != nil {
			return err
		}
		if have > Version {
			return versionErr(schema, have)
		}
		for v := have; v < Version; v++ {
			if _, err := tx.Exec(ctx, migrations[v](schema)); err != nil {
				return fmt.Errorf("migrate %q to version %d: %w", schema, v+1, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+Table(schema, "schema_version")+" (version) VALUES ($1)", v+1); err != nil {
				return fmt.Errorf("migrate %q to version %d: %w", schema, v+1, err)
			}
		}
		return nil
	})
}

// MigrationCount is len(migrations), which Version must equal.
func MigrationCount() int { return len(migrations) }

package pgdb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand/driver"
)

// Writer is what a producer's writes need of a connection: the driver's
// pool, or the caller's own transaction (driver.TxFrom) — a pgx.Tx, or a
// *sql.Tx of a database/sql DB opened with pgx's stdlib driver. Statements
// written through it take scalar and array arguments pgx encodes; one
// statement at a time (a pgx.Tx is one connection: never two at once).
type Writer interface {
	// Exec runs one statement and returns how many rows it touched.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// QueryRow runs one statement and scans its first row (pgx.ErrNoRows
	// or sql.ErrNoRows when it has none: test with IsNoRows).
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WriterFor returns the caller's transaction ctx carries (which CheckTx
// accepted), else pool.
func WriterFor(ctx context.Context, pool *pgxpool.Pool) Writer {
	switch tx := driver.TxFrom(ctx).(type) {
	case pgx.Tx:
		return pgxWriter{tx}
	case *sql.Tx:
		return sqlWriter{tx}
	}
	return pgxWriter{pool}
}

// InTx reports whether ctx carries a caller's transaction.
func InTx(ctx context.Context) bool { return driver.TxFrom(ctx) != nil }

// CheckTx returns nil when tx is a transaction a driver on pool can write
// inside: a pgx.Tx on pool's server, database and user, or a *sql.Tx (its
// database cannot be read without I/O: the caller answers for it).
func CheckTx(pool *pgxpool.Pool, tx any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		if tx.Conn() == nil || !sameDatabase(tx.Conn().Config(), pool.Config().ConnConfig) {
			return fmt.Errorf("the pgx.Tx is on another server, database or user than the driver's pool")
		}
		return nil
	case *sql.Tx:
		if tx == nil {
			return fmt.Errorf("a nil *sql.Tx")
		}
		return nil
	}
	return fmt.Errorf("a %T is not a PostgreSQL transaction (want a pgx.Tx or a *sql.Tx)", tx)
}

// IsNoRows reports whether err says a QueryRow found no row, from pgx or
// database/sql alike.
func IsNoRows(err error) bool { return err == pgx.ErrNoRows || err == sql.ErrNoRows }

type pgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgxWriter struct{ c pgxExecer }

func (w pgxWriter) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := w.c.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (w pgxWriter) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return w.c.QueryRow(ctx, sql, args...)
}

type sqlWriter struct{ tx *sql.Tx }

func (w sqlWriter) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	r, err := w.tx.ExecContext(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// QueryRow: a *sql.Row is a pgx.Row (Scan(dest ...any) error).
func (w sqlWriter) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return w.tx.QueryRowContext(ctx, sql, args...)
}

package pgdb

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Location is where errand's PostgreSQL result backend keeps its task
// states: the value its Location method returns (driver.Located). errand's
// PostgreSQL broker co-locates with a backend whose location is a
// *Location in the same database and schema (Same), writing the states
// there itself in the statement or transaction of a publish, a fetch or an
// ack (driver.Colocator). The type is in this module, which both drivers
// import, so no other driver can declare it.
//
// The layout of the states is the backend's, written and read through
// this package's states functions (states.go), so the broker writes
// exactly what the backend reads.
type Location struct {
	Pool   *pgxpool.Pool
	Schema string
	// Expiry is the backend's result expiry: each state written expires
	// this long after its write. Same ignores it.
	Expiry time.Duration
}

// Same reports whether l and o name one schema of one database on one
// server: what one statement can reach together. It compares the pools'
// configured host, port, database and user; it does no I/O.
func (l *Location) Same(o *Location) bool {
	if l == nil || o == nil || l.Schema != o.Schema {
		return false
	}
	if l.Pool == o.Pool {
		return true
	}
	return sameDatabase(l.Pool.Config().ConnConfig, o.Pool.Config().ConnConfig)
}

func sameDatabase(a, b *pgx.ConnConfig) bool {
	return a.Host == b.Host && a.Port == b.Port && a.Database == b.Database && a.User == b.User
}

// Table is schema.name quoted as one SQL identifier.
func Table(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

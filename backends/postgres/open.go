package postgresbackend

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

func init() {
	driver.RegisterBackend("postgres", Open)
	driver.RegisterBackend("postgresql", Open)
}

// The query parameters Open reads itself (see the package doc); every
// other one goes to pgxpool.ParseConfig (pgx's own, such as
// pool_max_conns, and the server's run-time parameters, such as
// statement_timeout).
var ownParams = []string{"schema", "result_expiry", "group_expiry", "timeout", "retention_interval", "retention_batch", "poll_interval"}

// Open returns a backend for a postgres:// or postgresql:// URL (see the
// package doc). It makes a pool of its own, which Close closes, and
// checks the schema's version as New does: it never creates the schema
// (run Migrate, or errand migrate).
func Open(ctx context.Context, u *url.URL) (driver.Backend, error) {
	opts, cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres backend: %w", err)
	}
	b, err := New(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.ownPool = true
	return b, nil
}

// MigrateURL runs Migrate on the database and schema a postgres:// or
// postgresql:// URL names (as Open reads it), on a connection of its own:
// what errand migrate does.
func MigrateURL(ctx context.Context, u *url.URL) error {
	opts, cfg, err := parseURL(u)
	if err != nil {
		return err
	}
	if err := pgdb.MigrateConfig(ctx, cfg, opts.Schema); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// parseURL splits u into errand's Options and pgx's pool configuration.
func parseURL(u *url.URL) (*Options, *pgxpool.Config, error) {
	own, cfg, err := pgdb.SplitURL(u, ownParams)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres backend: %w", err)
	}
	opts := &Options{Schema: own.Get("schema")}
	if err := driver.DurationParams(own, map[string]*time.Duration{
		"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry, "timeout": &opts.CallTimeout,
		"retention_interval": &opts.RetentionInterval, "poll_interval": &opts.PollInterval,
	}); err != nil {
		return nil, nil, fmt.Errorf("postgres backend: %w", err)
	}
	if v := own.Get("retention_batch"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("postgres backend: retention_batch %q is not a positive count", v)
		}
		opts.RetentionBatch = n
	}
	return opts, cfg, nil
}

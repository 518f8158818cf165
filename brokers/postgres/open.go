package postgresbroker

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
	driver.RegisterBroker("postgres", Open)
	driver.RegisterBroker("postgresql", Open)
}

// ownParams are the URL's query parameters that are errand's, not pgx's:
// removed before the rest goes to pgxpool.ParseConfig.
var ownParams = []string{"schema", "timeout", "max_payload", "poll_interval"}

// Open returns a broker for a postgres:// or postgresql:// URL (see the
// package doc): the URL, less errand's own parameters, configures a pool
// of the broker's own (pgxpool.ParseConfig: pgx's parameters such as
// pool_max_conns and sslmode pass through), which Close closes.
// schema=NAME sets Options.Schema, timeout=DURATION Options.CallTimeout,
// max_payload=BYTES Options.MaxPayload (negative: no limit),
// poll_interval=DURATION Options.PollInterval. The schema must exist at
// this build's version (errand migrate): Open never creates it.
func Open(ctx context.Context, u *url.URL) (driver.Broker, error) {
	opts, cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres broker: %w", err)
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
		return nil, nil, fmt.Errorf("postgres broker: %w", err)
	}
	opts := &Options{Schema: own.Get("schema")}
	if v := own.Get("max_payload"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, nil, fmt.Errorf("postgres broker: max_payload %q is not a byte count (a negative count means no limit)", v)
		}
		opts.MaxPayload = n
	}
	if err := driver.DurationParams(own, map[string]*time.Duration{"timeout": &opts.CallTimeout, "poll_interval": &opts.PollInterval}); err != nil {
		return nil, nil, fmt.Errorf("postgres broker: %w", err)
	}
	return opts, cfg, nil
}

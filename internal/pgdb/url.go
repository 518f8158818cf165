package pgdb

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SplitURL splits a postgres:// or postgresql:// URL into the values of
// the parameters named own (a driver's own, such as schema=) and pgx's
// pool configuration of the rest (pgxpool.ParseConfig: pgx's parameters
// and the server's run-time parameters pass through). pgx's parse errors
// hide the password of the string they quote.
func SplitURL(u *url.URL, own []string) (url.Values, *pgxpool.Config, error) {
	q := u.Query()
	mine := url.Values{}
	for _, k := range own {
		if q.Has(k) {
			mine[k] = q[k]
			q.Del(k)
		}
	}
	rest := *u
	rest.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(rest.String())
	if err != nil {
		return nil, nil, err
	}
	return mine, cfg, nil
}

// MigrateConfig runs Migrate for schema ("": DefaultSchema) on a pool of one connection of
// cfg, closed before it returns: what errand migrate does with a URL.
func MigrateConfig(ctx context.Context, cfg *pgxpool.Config, schema string) error {
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return Migrate(ctx, pool, schema)
}

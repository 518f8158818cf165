package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
)

// migrators are the URL schemes whose drivers keep a versioned schema,
// with the call that creates it or brings it to this build's version. A
// schema is never created on open: errand migrate (or the driver's
// Migrate) is the explicit step.
var migrators = map[string]map[string]func(c *cli, u *url.URL) error{
	"broker": {
		"postgres":   func(c *cli, u *url.URL) error { return postgresbroker.MigrateURL(c.ctx, u) },
		"postgresql": func(c *cli, u *url.URL) error { return postgresbroker.MigrateURL(c.ctx, u) },
	},
	"backend": {
		"postgres":   func(c *cli, u *url.URL) error { return postgresbackend.MigrateURL(c.ctx, u) },
		"postgresql": func(c *cli, u *url.URL) error { return postgresbackend.MigrateURL(c.ctx, u) },
	},
}

// runMigrate creates or upgrades the schema of the broker and the backend
// the flags or the environment name, where their driver keeps one
// (PostgreSQL); for the others it says there is nothing to migrate.
func runMigrate(c *cli, args []string) error {
	fs := c.newFlags()
	c.urlFlags(fs)
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected argument %q (give the URLs with --broker and --backend)", pos[0])
	}
	brokerURL, backendURL := c.urls()
	if brokerURL == "" && backendURL == "" {
		return usageErrorf("nothing to migrate: give --broker URL and/or --backend URL (or set ERRAND_BROKER_URL, ERRAND_BACKEND_URL)")
	}
	for _, side := range []struct{ kind, raw string }{{"broker", brokerURL}, {"backend", backendURL}} {
		if side.raw == "" {
			continue
		}
		u, err := url.Parse(side.raw)
		if err != nil {
			return usageErrorf("%s URL %s does not parse", side.kind, errand.RedactURL(side.raw))
		}
		m := migrators[side.kind][strings.ToLower(u.Scheme)]
		if m == nil {
			fmt.Fprintf(c.stdout, "%s %s: nothing to migrate (the %s:// driver keeps no schema)\n", side.kind, errand.RedactURL(side.raw), u.Scheme)
			continue
		}
		if err := m(c, u); err != nil {
			return fmt.Errorf("%s %s: %w", side.kind, errand.RedactURL(side.raw), err)
		}
		fmt.Fprintf(c.stdout, "%s %s: schema at this build's version\n", side.kind, errand.RedactURL(side.raw))
	}
	return nil
}

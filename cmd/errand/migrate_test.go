package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// TestMigrate: errand migrate creates the PostgreSQL drivers' schema the
// URL names (never created on open: before it, every command says to run
// it), a second run finds it current, and a scheme that keeps no schema
// is said to have nothing to migrate.
func TestMigrate(t *testing.T) {
	t.Parallel()
	raw := os.Getenv("ERRAND_POSTGRES_URL")
	if raw == "" {
		needServices(t, "ERRAND_POSTGRES_URL is not set")
	}
	schema := pgdbtest.EmptySchema(t, pgdbtest.Pool(t))
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	pg := u.String()
	cmd := func(args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		code := run(ctx, args, &out, &errOut, func(string) string { return "" })
		return result{code, out.String(), errOut.String()}
	}

	if r := cmd("queues", "--broker", pg, "--backend", "memory://"); r.code != exitFailed || !strings.Contains(r.stderr, "errand migrate") {
		t.Fatalf("queues on an unmigrated schema: want exit 1 saying to run errand migrate, got:\n%s", r)
	}
	for range 2 { // the second run finds the schema current
		r := cmd("migrate", "--broker", pg, "--backend", "memory://")
		if r.code != exitOK || !strings.Contains(r.stdout, "schema at this build's version") || !strings.Contains(r.stdout, "nothing to migrate") {
			t.Fatalf("migrate: want exit 0, the broker's schema current and nothing to migrate for memory://, got:\n%s", r)
		}
		if strings.Contains(r.stdout, "errand@") && u.User != nil {
			if p, ok := u.User.Password(); ok && strings.Contains(r.stdout, p) {
				t.Fatalf("migrate printed the URL's password:\n%s", r)
			}
		}
	}
	if r := cmd("queues", "--broker", pg, "--backend", "memory://"); r.code != exitOK {
		t.Fatalf("queues after migrate: want exit 0, got:\n%s", r)
	}
	if r := cmd("migrate"); r.code != exitUsage {
		t.Fatalf("migrate without a URL: want a usage error, got:\n%s", r)
	}
}

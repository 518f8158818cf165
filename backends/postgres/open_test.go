package postgresbackend_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// withParams is ERRAND_POSTGRES_URL with scheme and the query parameters
// of kv set.
func withParams(t *testing.T, scheme string, kv ...string) string {
	u, err := url.Parse(pgdbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = scheme
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Both schemes open a backend on the schema and expiry the URL names,
// pgx's own parameters passing through; a schema never migrated, and a
// bad parameter, are refused with errors that say why.
func TestOpenByURL(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	for _, scheme := range []string{"postgres", "postgresql"} {
		b, err := errand.OpenBackend(ctx, withParams(t, scheme, "schema", schema, "result_expiry", "1m", "pool_max_conns", "2", "retention_interval", "1h"))
		if err != nil {
			t.Fatalf("OpenBackend(%s://): %v", scheme, err)
		}
		if e := b.(driver.Expirer).ResultExpiry(); e != time.Minute {
			t.Fatalf("result_expiry=1m gave %v", e)
		}
		id := scheme + "-task"
		if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{{TaskUUID: id, State: errand.StatePending}})...); err != nil {
			t.Fatal(err)
		}
		if st, err := b.GetState(ctx, id); err != nil || st.State != errand.StatePending {
			t.Fatalf("GetState = %+v, %v", st, err)
		}
		b.Close()
		if err := b.Close(); err != nil {
			t.Fatalf("a second Close = %v", err)
		}
		if _, err := b.GetState(ctx, id); !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("GetState after Close = %v, want driver.ErrClosed", err)
		}
	}
	if _, err := errand.OpenBackend(ctx, withParams(t, "postgres", "schema", schema+"_never")); !errors.Is(err, postgresbackend.ErrNoSchema) {
		t.Fatalf("opening a schema never migrated: %v; want ErrNoSchema", err)
	}
	if _, err := errand.OpenBackend(ctx, withParams(t, "postgres", "schema", schema, "timeout", "soon")); err == nil {
		t.Fatalf("opening with timeout=soon succeeded; want an error naming the parameter")
	}
}

// TestOpenErrorsHideCredentials: no credential form of a postgres:// URL
// shows in open errors. Port 1 refuses.
func TestOpenErrorsHideCredentials(t *testing.T) {
	conformance.RunOpenRedaction(t, "backend", map[string][]string{
		"postgres://alice:hunter2@127.0.0.1:1/errand":                     {"hunter2"},
		"postgresql://alice:hunter2@127.0.0.1:1/errand?sslmode=disable":   {"hunter2"},
		"postgres://alice@127.0.0.1:1/errand?password=hunter2":            {"hunter2"},
		"postgres://alice:p%40ss%2Fhunter2@127.0.0.1:1/errand":            {"p@ss/hunter2", "p%40ss%2Fhunter2"},
		"postgres://alice:hunter2@127.0.0.1:1/errand?timeout=soon":        {"hunter2"},
		"postgres://alice:hunter2@127.0.0.1:1/errand?pool_max_conns=many": {"hunter2"},
	})
}

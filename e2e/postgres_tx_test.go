package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// txApp is an application on PostgreSQL: an orders table of its own and
// errand's PostgreSQL broker and backend on the same database, with a
// worker running, counting each task's runs by its argument.
type txApp struct {
	pool   *pgxpool.Pool
	schema string
	srv    *errand.Server

	mu   sync.Mutex
	runs map[string]int
}

func newTxApp(t *testing.T) *txApp {
	t.Helper()
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	br, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	be, err := postgresbackend.New(ctx, pool, &postgresbackend.Options{Schema: schema, ResultExpiry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close(); be.Close() })
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgdb.Table(schema, "orders")+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	a := &txApp{pool: pool, schema: schema, srv: srv, runs: map[string]int{}}
	count := func(id string) {
		a.mu.Lock()
		a.runs[id]++
		a.mu.Unlock()
	}
	srv.Register("ship", func(id string) (string, error) { count(id); return "shipped " + id, nil })
	srv.Register("notify", func(id string, shipped ...string) (int, error) { count(id); return len(shipped), nil })
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4})
	w.Start()
	t.Cleanup(func() { w.Shutdown(context.Background()) })
	return a
}

func (a *txApp) ran(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[id]
}

// order writes the application's own row and sends, in the same
// transaction send, a chord shipping the order's three parcels and
// notifying once all are shipped.
func (a *txApp) order(ctx context.Context, w interface {
	Exec(context.Context, string, ...any) error
}, send context.Context, id string) (*errand.ChordAsyncResult, error) {
	if err := w.Exec(ctx, "INSERT INTO "+pgdb.Table(a.schema, "orders")+" (id) VALUES ($1)", id); err != nil {
		return nil, err
	}
	var parcels []*errand.Signature
	for i := range 3 {
		parcels = append(parcels, errand.NewSignature("ship", fmt.Sprintf("%s/%d", id, i)))
	}
	g, err := errand.NewGroup(parcels...)
	if err != nil {
		return nil, err
	}
	c, err := errand.NewChord(g, errand.NewSignature("notify", id))
	if err != nil {
		return nil, err
	}
	return a.srv.SendChord(send, c)
}

// flush sends a marker task outside any transaction and waits for it: the
// worker fetches in order, so by then it has seen whatever was committed
// before the marker was sent.
func (a *txApp) flush(t *testing.T, ctx context.Context) {
	t.Helper()
	id := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	r, err := a.srv.SendTask(ctx, errand.NewSignature("ship", id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx); err != nil {
		t.Fatalf("marker task: %v", err)
	}
}

type pgxExec struct{ tx pgx.Tx }

func (e pgxExec) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.tx.Exec(ctx, q, args...)
	return err
}

// TestPostgresTxBesideTheApplicationsWrite: a chord sent inside the
// application's own pgx transaction, beside its own INSERT, exists if and
// only if the transaction commits: a rolled-back order leaves no order,
// no message and no state, and nothing of it ever runs; a committed one
// runs each parcel and the callback exactly once.
func TestPostgresTxBesideTheApplicationsWrite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newTxApp(t)

	// Rolled back.
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A test that fails midway must not leave a transaction open: it
	// would hold the pool (and the schema's locks) forever.
	defer tx.Rollback(context.Background())
	lost, err := a.order(ctx, pgxExec{tx}, errand.WithTx(ctx, tx), "o-rolled-back")
	if err != nil {
		t.Fatalf("order inside the transaction: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	a.flush(t, ctx)
	for _, r := range append(lost.Group, lost.Callback) {
		if st, err := r.State(ctx); err == nil {
			t.Errorf("task %s of a rolled-back transaction has state %s; want none (states exist only if the transaction commits)", r.Signature.UUID, st.State)
		}
	}
	for _, id := range []string{"o-rolled-back", "o-rolled-back/0", "o-rolled-back/1", "o-rolled-back/2"} {
		if n := a.ran(id); n != 0 {
			t.Errorf("task %s of a rolled-back transaction ran %d times; want 0", id, n)
		}
	}

	// Committed: nothing runs before the commit, everything once after.
	tx, err = a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	kept, err := a.order(ctx, pgxExec{tx}, errand.WithTx(ctx, tx), "o-committed")
	if err != nil {
		t.Fatalf("order inside the transaction: %v", err)
	}
	a.flush(t, ctx)
	if n := a.ran("o-committed/0"); n != 0 {
		t.Fatalf("a parcel of an uncommitted transaction ran %d times before the commit; want 0", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var shipped int
	if err := kept.GetInto(ctx, &shipped); err != nil || shipped != 3 {
		t.Fatalf("chord callback of the committed order: %d, %v; want 3 parcels", shipped, err)
	}
	a.flush(t, ctx)
	for _, id := range []string{"o-committed", "o-committed/0", "o-committed/1", "o-committed/2"} {
		if n := a.ran(id); n != 1 {
			t.Errorf("task %s of a committed transaction ran %d times; want exactly once", id, n)
		}
	}
	var orders int
	a.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgdb.Table(a.schema, "orders")).Scan(&orders)
	if orders != 1 {
		t.Errorf("orders table has %d rows; want 1 (the committed order)", orders)
	}
}

// TestPostgresSQLTx: the same promise through database/sql (pgx's stdlib
// driver): a *sql.Tx carries the send.
func TestPostgresSQLTx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newTxApp(t)
	db := stdlib.OpenDBFromPool(a.pool)
	defer db.Close()
	for _, commit := range []bool{false, true} {
		id := fmt.Sprintf("sql-%v", commit)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+pgdb.Table(a.schema, "orders")+" (id) VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
		r, err := a.srv.SendTask(errand.WithTx(ctx, tx), errand.NewSignature("ship", id))
		if err != nil {
			t.Fatalf("SendTask inside a *sql.Tx: %v", err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if _, err := r.Get(ctx); err != nil {
				t.Fatalf("task of a committed *sql.Tx: %v", err)
			}
		}
		a.flush(t, ctx)
		want := 0
		if commit {
			want = 1
		}
		if n := a.ran(id); n != want {
			t.Errorf("task of a *sql.Tx (committed: %v) ran %d times; want %d", commit, n, want)
		}
	}
}

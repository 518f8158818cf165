package postgresbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// The producer's writes (SetStates, SetPendingIfAbsent, InitGroup) made
// with a ctx carrying the caller's transaction, a pgx.Tx or a *sql.Tx of
// pgx's stdlib driver, exist if and only if it commits: invisible to
// every other connection before, gone after a rollback.
func TestTx(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	b := harness(t, pool, nil).New(t, 0)
	tr := b.(driver.Transactor)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })

	type txn struct {
		tx               any
		commit, rollback func() error
	}
	begins := map[string]func(t *testing.T) txn{
		"pgx.Tx": func(t *testing.T) txn {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tx.Rollback(ctx) })
			return txn{tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }}
		},
		"sql.Tx": func(t *testing.T) txn {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tx.Rollback() })
			return txn{tx, tx.Commit, tx.Rollback}
		},
	}
	for name, begin := range begins {
		t.Run(name, func(t *testing.T) {
			for _, commit := range []bool{false, true} {
				x := begin(t)
				if err := tr.CheckTx(x.tx); err != nil {
					t.Fatalf("CheckTx(%T) = %v, want nil", x.tx, err)
				}
				id, pending, g := t.Name()+"-set", t.Name()+"-pending", t.Name()+"-group"
				if commit {
					id, pending, g = id+"-c", pending+"-c", g+"-c"
				}
				tctx := errand.WithTx(ctx, x.tx)
				now := time.Now().UTC().Truncate(time.Microsecond)
				if err := errors.Join(b.SetStates(tctx, []*errand.TaskState{{TaskUUID: id, State: errand.StatePending, CreatedAt: now}})...); err != nil {
					t.Fatalf("SetStates in the tx: %v", err)
				}
				if err := errors.Join(b.(driver.PendingWriter).SetPendingIfAbsent(tctx, []*errand.TaskState{{TaskUUID: pending, State: errand.StatePending, CreatedAt: now}})...); err != nil {
					t.Fatalf("SetPendingIfAbsent in the tx: %v", err)
				}
				if err := b.InitGroup(tctx, g, []string{id, pending}); err != nil {
					t.Fatalf("InitGroup in the tx: %v", err)
				}
				absent := func(when string) {
					t.Helper()
					for _, id := range []string{id, pending} {
						if st, err := b.GetState(ctx, id); !errors.Is(err, driver.ErrTaskNotFound) {
							t.Fatalf("%s: the state written in the tx reads %+v, %v outside it; want ErrTaskNotFound", when, st, err)
						}
					}
					if _, err := b.ClaimChord(ctx, g, "x"); !errors.Is(err, driver.ErrGroupNotFound) {
						t.Fatalf("%s: the group made in the tx claims %v outside it; want ErrGroupNotFound", when, err)
					}
				}
				absent("before the tx ends")
				if !commit {
					if err := x.rollback(); err != nil {
						t.Fatal(err)
					}
					absent("after a rollback")
					continue
				}
				if err := x.commit(); err != nil {
					t.Fatal(err)
				}
				for _, id := range []string{id, pending} {
					if st, err := b.GetState(ctx, id); err != nil || st.State != errand.StatePending || !st.CreatedAt.Equal(now) {
						t.Fatalf("after the commit, the state written in the tx reads %+v, %v; want PENDING created at %v", st, err, now)
					}
				}
				if d, n, err := b.CompleteGroupMember(ctx, g, id); err != nil || d != 1 || n != 2 {
					t.Fatalf("after the commit, completing a member of the group made in the tx: %d/%d, %v; want 1/2", d, n, err)
				}
			}
		})
	}
	// A transaction of another kind, or ended: refused or failing, never
	// written outside it.
	if err := tr.CheckTx(struct{}{}); err == nil {
		t.Fatalf("CheckTx of a struct{} = nil, want an error")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	ended := errand.WithTx(ctx, pgx.Tx(tx))
	if errs := b.SetStates(ended, []*errand.TaskState{{TaskUUID: "ended-tx", State: errand.StatePending}}); errors.Join(errs...) == nil {
		t.Fatalf("SetStates in an ended tx succeeded; want an error")
	}
	if _, err := b.GetState(ctx, "ended-tx"); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Fatalf("SetStates in an ended tx wrote outside it: %v", err)
	}
}

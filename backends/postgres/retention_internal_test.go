package postgresbackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

func newTestBackend(t *testing.T, pool *pgxpool.Pool, schema string, o Options) *Backend {
	t.Helper()
	o.Schema = schema
	b, err := New(context.Background(), pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func count(t *testing.T, pool *pgxpool.Pool, schema, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgdb.Table(schema, table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The sweep deletes expired rows in statements of at most a batch each,
// until one finds fewer: 250 expired states in batches of 100 are
// 100+100+50, then an expired group's member rows, then the group. Live
// states and groups stay.
func TestSweepBoundedBatches(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b := newTestBackend(t, pool, schema, Options{RetentionInterval: -1})
	var sts []*driver.TaskState
	for i := range 300 {
		sts = append(sts, &driver.TaskState{TaskUUID: fmt.Sprint("t", i), State: driver.StateSuccess, CreatedAt: time.Now()})
	}
	if err := errors.Join(b.SetStates(ctx, sts)...); err != nil {
		t.Fatal(err)
	}
	if err := b.InitGroup(ctx, "old", []string{"t0", "t1", "t2"}); err != nil {
		t.Fatal(err)
	}
	if err := b.InitGroup(ctx, "live", []string{"t3", "t4"}); err != nil {
		t.Fatal(err)
	}
	// Expire 250 states (t0..t249) and the group "old".
	if _, err := pool.Exec(ctx, "UPDATE "+pgdb.Table(schema, "states")+" SET expires_at = now() - interval '1s' WHERE substr(id, 2)::int < 250"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgdb.Table(schema, "groups")+" SET expires_at = now() - interval '1s' WHERE id = 'old'"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetState(ctx, "t0"); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Fatalf("an expired state not yet swept reads %v; want ErrTaskNotFound", err)
	}
	counts, err := b.sweep(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{100, 100, 50, 3, 1}; !slices.Equal(counts, want) {
		t.Fatalf("sweep with batches of 100 deleted %v rows per statement; want %v (states 100+100+50, the expired group's 3 members, the group)", counts, want)
	}
	if n := count(t, pool, schema, "states"); n != 50 {
		t.Fatalf("%d states left, want the 50 live ones", n)
	}
	if n := count(t, pool, schema, "group_members"); n != 2 {
		t.Fatalf("%d member rows left, want the live group's 2", n)
	}
	if d, n, err := b.CompleteGroupMember(ctx, "live", "t3"); err != nil || d != 1 || n != 2 {
		t.Fatalf("the live group after a sweep: %d/%d, %v", d, n, err)
	}
	if _, err := b.ClaimChord(ctx, "old", "x"); !errors.Is(err, driver.ErrGroupNotFound) {
		t.Fatalf("the swept group claims %v, want ErrGroupNotFound", err)
	}
}

// A backend sweeps by itself every RetentionInterval: states written
// with a short result expiry are gone from the table soon after.
func TestRetentionRemovesExpiredRows(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b := newTestBackend(t, pool, schema, Options{ResultExpiry: 50 * time.Millisecond, GroupExpiry: 50 * time.Millisecond, RetentionInterval: 50 * time.Millisecond, RetentionBatch: 7})
	var sts []*driver.TaskState
	for i := range 40 {
		sts = append(sts, &driver.TaskState{TaskUUID: fmt.Sprint("t", i), State: driver.StateSuccess, CreatedAt: time.Now()})
	}
	if err := errors.Join(b.SetStates(ctx, sts)...); err != nil {
		t.Fatal(err)
	}
	if err := b.InitGroup(ctx, "g", []string{"t0", "t1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, schema, "states")+count(t, pool, schema, "groups")+count(t, pool, schema, "group_members") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("expired rows still in the tables 10s after they expired: %d states, %d groups, %d members; want the retention sweep to remove them",
				count(t, pool, schema, "states"), count(t, pool, schema, "groups"), count(t, pool, schema, "group_members"))
		}
		time.Sleep(20 * time.Millisecond) // polling for the sweep with a deadline
	}
}

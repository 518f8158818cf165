package postgresbroker_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// The capabilities' promises the kit does not check on every broker:
// Fetch honours a pause itself, the tables of the capabilities stay
// bounded, a unique key taken in a caller's transaction follows it, and
// Archived lists a bounded preview.

// newOpsBroker returns a broker on a fresh schema of its own.
func newOpsBroker(t *testing.T) (*postgresbroker.Broker, *pgxpool.Pool, string) {
	t.Helper()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b, err := postgresbroker.New(context.Background(), pool, &postgresbroker.Options{Schema: schema, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b, pool, schema
}

func countRows(t *testing.T, pool *pgxpool.Pool, schema, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgdb.Table(schema, table)+" WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// TestFetchHonoursPause: a paused queue's messages stay where they are
// for every consumer, polling Paused or not, and Resume wakes a Fetch
// waiting on the queue.
func TestFetchHonoursPause(t *testing.T) {
	b, _, _ := newOpsBroker(t)
	ctx := context.Background()
	q := "paused-" + t.Name()
	if err := b.Pause(ctx, q); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := b.Publish(ctx, driver.Message{ID: "m1", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	ds, err := b.Fetch(short, q, 1, time.Minute)
	cancel()
	if len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pause promise broken: Fetch of a paused queue returned %d messages, %v; want none until its ctx ends", len(ds), err)
	}
	got := make(chan []*driver.Delivery, 1)
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	go func() {
		ds, _ := b.Fetch(fctx, q, 1, time.Minute)
		got <- ds
	}()
	if err := b.Resume(ctx, q); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if ds := <-got; len(ds) != 1 || ds[0].ID != "m1" {
		t.Fatalf("pause promise broken: after Resume a waiting Fetch returned %d messages, want m1", len(ds))
	}
}

// TestCompletedBounded: the completed messages a queue keeps stay near
// CompletedMax however many are acked, and Stats.Completed still counts
// every ack.
func TestCompletedBounded(t *testing.T) {
	b, pool, schema := newOpsBroker(t)
	ctx := context.Background()
	q := "done-" + t.Name()
	const n = postgresbroker.CompletedMax + 4*postgresbroker.CompletedTrimBatch
	var ms []driver.Message
	for i := range n {
		ms = append(ms, driver.Message{ID: fmt.Sprintf("m%05d", i), Queue: q, Body: []byte("x")})
	}
	if err := b.Publish(ctx, ms...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for acked := 0; acked < n; {
		ds, err := b.Fetch(ctx, q, 50, time.Minute)
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		for i, err := range b.Ack(ctx, ds) {
			if err != nil {
				t.Fatalf("Ack %s: %v", ds[i].ID, err)
			}
		}
		acked += len(ds)
	}
	kept := countRows(t, pool, schema, "completed", "queue = $1", q)
	if most := postgresbroker.CompletedMax + 2*postgresbroker.CompletedTrimEvery + 50; kept > most {
		t.Errorf("retention promise broken: after %d acks the queue keeps %d completed rows, want at most about CompletedMax (%d)", n, kept, most)
	}
	if kept < postgresbroker.CompletedMax {
		t.Errorf("listing promise broken: after %d acks the queue keeps %d completed rows, want at least CompletedMax (%d)", n, kept, postgresbroker.CompletedMax)
	}
	st, err := b.Stats(ctx, q)
	if err != nil || st.Completed != n {
		t.Errorf("stats promise broken: Stats = %+v, %v; want Completed %d (every ack, trimmed or kept)", st, err, n)
	}
	ls, err := b.List(ctx, q, driver.ListCompleted, 0, 1)
	if err != nil || len(ls) != 1 || ls[0].ID != ms[n-1].ID {
		t.Errorf("listing promise broken: the newest completed is %v, %v; want %s", ls, err, ms[n-1].ID)
	}
}

// TestSweepDeletesExpired: unique keys, rate buckets, heartbeats and
// concurrency slots past their time are deleted by the sweep a broker's
// Beat runs, and a live one stays.
func TestSweepDeletesExpired(t *testing.T) {
	b, pool, schema := newOpsBroker(t)
	ctx := context.Background()
	if _, err := b.Lock(ctx, "gone", "t1", time.Millisecond); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if _, err := b.Lock(ctx, "held", "t2", time.Hour); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := b.Beat(ctx, "w-gone", []byte("{}"), time.Millisecond); err != nil {
		t.Fatalf("Beat: %v", err)
	}
	if _, err := b.Take(ctx, "bucket", 1000, 1); err != nil { // full again in 1ms, kept a second more
		t.Fatalf("Take: %v", err)
	}
	for _, s := range []struct {
		holder string
		ttl    time.Duration
	}{{"h-gone", time.Millisecond}, {"h-live", time.Hour}} {
		if ok, err := b.Acquire(ctx, s.holder, []driver.Slot{{Key: "slots", Limit: 2}}, s.ttl); !ok || err != nil {
			t.Fatalf("Acquire(%s): %v, %v", s.holder, ok, err)
		}
	}
	// Time passing is the event: wait until every row above has expired.
	deadline := time.Now().Add(30 * time.Second)
	for countRows(t, pool, schema, "rate_buckets", "expires_at > clock_timestamp()")+
		countRows(t, pool, schema, "unique_keys", "key = 'gone' AND expires_at > clock_timestamp()")+
		countRows(t, pool, schema, "concurrency_slots", "holder = 'h-gone' AND expires_at > clock_timestamp()") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("rows never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new broker sweeps on its first Beat.
	b2, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: schema})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer b2.Close()
	if err := b2.Beat(ctx, "w-live", []byte("{}"), time.Hour); err != nil {
		t.Fatalf("Beat: %v", err)
	}
	for _, c := range []struct {
		table, where string
		want         int
	}{
		{"unique_keys", "key = 'gone'", 0},
		{"unique_keys", "key = 'held'", 1},
		{"heartbeats", "id = 'w-gone'", 0},
		{"heartbeats", "id = 'w-live'", 1},
		{"rate_buckets", "true", 0},
		{"concurrency_slots", "holder = 'h-gone'", 0},
		{"concurrency_slots", "holder = 'h-live'", 1},
	} {
		if got := countRows(t, pool, schema, c.table, c.where); got != c.want {
			t.Errorf("retention promise broken: %s WHERE %s has %d rows after a sweep, want %d", c.table, c.where, got, c.want)
		}
	}
}

// TestUniqueLockInTx: a unique key taken inside a caller's transaction (a
// pgx.Tx, or a *sql.Tx of pgx's stdlib driver) is free again when it rolls
// back, and held once it commits; Unlock inside one frees it only if it
// commits.
func TestUniqueLockInTx(t *testing.T) {
	b, pool, _ := newOpsBroker(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", pgdbtest.URL(t))
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	type tx struct {
		tx               any
		commit, rollback func() error
	}
	begins := map[string]func() tx{
		"pgx.Tx": func() tx {
			x, err := pool.Begin(ctx)
			if err != nil {
				t.Fatalf("Begin: %v", err)
			}
			return tx{x, func() error { return x.Commit(ctx) }, func() error { return x.Rollback(ctx) }}
		},
		"*sql.Tx": func() tx {
			x, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("BeginTx: %v", err)
			}
			return tx{x, x.Commit, x.Rollback}
		},
	}
	for kind, begin := range begins {
		for _, commit := range []bool{false, true} {
			key := fmt.Sprintf("k-%s-%v", kind, commit)
			x := begin()
			if err := b.CheckTx(x.tx); err != nil {
				t.Fatalf("CheckTx(%s): %v", kind, err)
			}
			inTx := driver.WithTx(ctx, x.tx)
			if h, err := b.Lock(inTx, key, "in-tx", time.Minute); err != nil || h != "in-tx" {
				t.Fatalf("Lock in a %s = %q, %v; want in-tx", kind, h, err)
			}
			end, want := x.rollback, "other"
			if commit {
				end, want = x.commit, "in-tx"
			}
			if err := end(); err != nil {
				t.Fatalf("end the %s: %v", kind, err)
			}
			if h, err := b.Lock(ctx, key, "other", time.Minute); err != nil || h != want {
				t.Errorf("unique promise broken: after the %s that took %s ended (commit %v), Lock by another = %q, %v; want holder %q", kind, key, commit, h, err, want)
			}
		}
		// Unlock inside a transaction: the key stays held until it commits.
		key := "k-unlock-" + kind
		if _, err := b.Lock(ctx, key, "holder", time.Minute); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		for _, commit := range []bool{false, true} {
			x := begin()
			if err := b.Unlock(driver.WithTx(ctx, x.tx), key, "holder"); err != nil {
				t.Fatalf("Unlock in a %s: %v", kind, err)
			}
			end, want := x.rollback, "holder"
			if commit {
				end, want = x.commit, "other"
			}
			if err := end(); err != nil {
				t.Fatalf("end the %s: %v", kind, err)
			}
			if h, err := b.Lock(ctx, key, "other", time.Minute); err != nil || h != want {
				t.Errorf("unique promise broken: after an Unlock in a %s that ended (commit %v), Lock by another = %q, %v; want holder %q", kind, commit, h, err, want)
			}
		}
	}
}

// TestArchivedPreview: Archived lists a body longer than ArchivePreview
// by its first ArchivePreview bytes and its size; ArchivedEntry reads it
// whole.
func TestArchivedPreview(t *testing.T) {
	b, _, _ := newOpsBroker(t)
	ctx := context.Background()
	q := "big-" + t.Name()
	body := bytes.Repeat([]byte("b"), postgresbroker.ArchivePreview+10)
	if err := b.Publish(ctx, driver.Message{ID: "big", Queue: q, Body: body}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ds, err := b.Fetch(ctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch: %d, %v", len(ds), err)
	}
	if err := b.Archive(ctx, ds[0], driver.ArchiveEntry{Reason: "test", At: time.Now()}, driver.Retention{}); err != nil {
		t.Fatalf("Archive: %v", err)
	}
	es, err := b.Archived(ctx, q, 0, 10)
	if err != nil || len(es) != 1 {
		t.Fatalf("Archived: %d, %v", len(es), err)
	}
	if len(es[0].Body) != postgresbroker.ArchivePreview || es[0].Size != len(body) {
		t.Errorf("archive promise broken: Archived lists %d bytes with Size %d, want the first %d and Size %d", len(es[0].Body), es[0].Size, postgresbroker.ArchivePreview, len(body))
	}
	e, err := b.ArchivedEntry(ctx, q, "big")
	if err != nil || !bytes.Equal(e.Body, body) || e.Size != 0 {
		t.Errorf("archive promise broken: ArchivedEntry = %d bytes, Size %d, %v; want the whole %d bytes, Size 0", len(e.Body), e.Size, err, len(body))
	}
}

package pgdb_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// The states layout round-trips a state through set_states and
// GetStateSQL, keeps the last of two states of one task in a batch,
// writes if_absent only where a task has none (an expired one counting as
// none), and notifies the states channel with each written task's id.
func TestStatesLayout(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	loc := &pgdb.Location{Pool: pool, Schema: schema, Expiry: time.Hour}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{pgdb.StatesChannel(schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	at := time.Now().UTC().Truncate(time.Microsecond)
	want := &driver.TaskState{TaskUUID: "t1", TaskName: "n", State: driver.StateSuccess, Attempt: 2,
		Results: []driver.Result{{Type: "int", Value: json.RawMessage("7")}}, CreatedAt: at, StartedAt: at.Add(time.Second), FinishedAt: at.Add(2 * time.Second)}
	var a pgdb.StateArgs
	a.Append(&driver.TaskState{TaskUUID: "t1", TaskName: "n", State: driver.StatePending, CreatedAt: at})
	a.Append(want)
	if n, _, err := loc.WriteStates(ctx, pgdb.WriterFor(ctx, pool), &a, false); err != nil || n != 1 {
		t.Fatalf("WriteStates of two states of one task = %d, %v; want 1 row written", n, err)
	}
	got := read(t, loc, "t1")
	if got.State != driver.StateSuccess || got.Attempt != 2 || string(got.Results[0].Value) != "7" ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.StartedAt.Equal(want.StartedAt) || !got.FinishedAt.Equal(want.FinishedAt) {
		t.Fatalf("read back %+v, want %+v (the batch's last state of the task)", got, want)
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	note, err := conn.Conn().WaitForNotification(nctx)
	if err != nil || note.Payload != "t1" {
		t.Fatalf("notification after a write: %+v, %v; want the task's id t1 on %s", note, err, pgdb.StatesChannel(schema))
	}

	// if_absent: t1 has a state and keeps it; t2 gets PENDING.
	var p pgdb.StateArgs
	p.Append(&driver.TaskState{TaskUUID: "t1", State: driver.StatePending})
	p.Append(&driver.TaskState{TaskUUID: "t2", State: driver.StatePending})
	if n, _, err := loc.WriteStates(ctx, pgdb.WriterFor(ctx, pool), &p, true); err != nil || n != 1 {
		t.Fatalf("WriteStates if_absent = %d, %v; want 1 (t2 only)", n, err)
	}
	if got := read(t, loc, "t1"); got.State != driver.StateSuccess {
		t.Fatalf("if_absent overwrote t1's SUCCESS with %s", got.State)
	}
	// An expired state counts as none.
	pool.Exec(ctx, "UPDATE "+pgdb.Table(schema, "states")+" SET expires_at = now() - interval '1s' WHERE id = 't1'")
	if n, _, err := loc.WriteStates(ctx, pgdb.WriterFor(ctx, pool), &p, true); err != nil || n != 1 {
		t.Fatalf("WriteStates if_absent over an expired state = %d, %v; want 1 (t1 again)", n, err)
	}
	if got := read(t, loc, "t1"); got.State != driver.StatePending {
		t.Fatalf("if_absent over an expired state left %s, want PENDING", got.State)
	}
}

func read(t *testing.T, loc *pgdb.Location, id string) *driver.TaskState {
	t.Helper()
	var body string
	var c, s, f *time.Time
	var p *string
	if err := loc.Pool.QueryRow(context.Background(), pgdb.GetStateSQL(loc.Schema), id).Scan(&body, &c, &s, &f, &p); err != nil {
		t.Fatalf("read state of %s: %v", id, err)
	}
	st, err := pgdb.DecodeState(id, body, c, s, f, p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

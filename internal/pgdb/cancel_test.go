package pgdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
	"github.com/errand-go/errand/internal/statejson"
)

// The body cancel_states writes — the task's UUID, name, state and
// attempt from its row, then CancelTail — is the JSON StateArgs.Append
// would store for that CANCELLED state, byte for byte, so it is read
// back by statejson's own decoder like any other.
func TestCancelBody(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	loc := &pgdb.Location{Pool: pool, Schema: schema, Expiry: time.Hour}
	at := time.Now().UTC().Truncate(time.Microsecond)
	for _, attempt := range []int{0, 3} {
		id := fmt.Sprint("t", attempt)
		var a pgdb.StateArgs
		a.Append(&driver.TaskState{TaskUUID: id, TaskName: "email.send", State: driver.StateStarted, Attempt: attempt, CreatedAt: at})
		if _, _, err := loc.WriteStates(ctx, pgdb.WriterFor(ctx, pool), &a, false); err != nil {
			t.Fatal(err)
		}
		cancel := &driver.TaskState{TaskUUID: id, State: driver.StateCancelled, Error: `errand: task "cancelled"`, ErrorKind: "cancelled",
			ErrorDetail: `{"by":"op"}`, FinishedAt: at}
		var c pgdb.CancelArgs
		if err := c.Append(cancel); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, pgdb.CancelStatesSQL(schema), append(c.Args(), time.Hour)...)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		var body string
		if err := pool.QueryRow(ctx, "SELECT body FROM "+pgdb.Table(schema, "states")+" WHERE id = $1", id).Scan(&body); err != nil {
			t.Fatal(err)
		}
		want := *cancel
		want.TaskName, want.Attempt = "email.send", attempt
		want.CreatedAt, want.FinishedAt = time.Time{}, time.Time{}
		enc, _ := statejson.Marshal(&want)
		if body != string(enc) {
			t.Errorf("attempt %d: cancel_states wrote the body\n%s\nwant StateArgs.Append's\n%s", attempt, body, enc)
		}
	}
}

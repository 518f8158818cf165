package pgdb_test

import (
	"context"
	"testing"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
	"github.com/errand-go/errand/internal/statejson"
)

// StartedBody, the body a co-located fetch stores for a STARTED state, is
// the JSON StateArgs.Append stores for that state (byte for byte where
// encoding/json writes the strings as they are), and decodes to the same
// state whatever its ID and name hold.
func TestStartedBody(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	for _, c := range []struct{ id, name string }{
		{"f47ac10b-58cc-4372-a567-0e02b2c3d479", "email.send"},
		{`id "quoted" \ back`, "ns:a.b-c%d+[x]_"},
		{"<html>&", "tâche\n\tnamed ☃"},
	} {
		want := &driver.TaskState{TaskUUID: c.id, TaskName: c.name, State: driver.StateStarted, Attempt: 3}
		var body string
		if err := pool.QueryRow(ctx, "SELECT "+pgdb.StartedBody("$1", "$2", "$3::int"), c.id, c.name, 3).Scan(&body); err != nil {
			t.Fatal(err)
		}
		got, err := pgdb.DecodeState(c.id, body, nil, nil, nil, nil)
		if err != nil || got.TaskUUID != want.TaskUUID || got.TaskName != want.TaskName || got.State != want.State || got.Attempt != want.Attempt || !got.CreatedAt.IsZero() {
			t.Errorf("StartedBody(%q, %q, 3) = %s, decoded %+v, %v; want %+v", c.id, c.name, body, got, err, want)
		}
		if enc, _ := statejson.Marshal(want); c.name == "email.send" && body != string(enc) {
			t.Errorf("StartedBody = %s; want %s (StateArgs.Append's encoding)", body, enc)
		}
	}
}

package postgresbackend_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// A state's Progress comes back byte for byte (spaces, key order and
// escapes as the task wrote them, which a JSON encoding would change)
// from GetState, GroupStates and Start's Prev; a state without progress
// has none.
func TestProgress(t *testing.T) {
	ctx := context.Background()
	b := harness(t, pgdbtest.Pool(t), nil).New(t, time.Hour)
	progress := json.RawMessage("{ \"z\": 1,\n  \"a\": \"\\u00e9\\/\" }")
	now := time.Now().UTC()
	if err := errors.Join(b.SetStates(ctx, []*driver.TaskState{
		{TaskUUID: "p", TaskName: "n", State: driver.StateStarted, Attempt: 1, CreatedAt: now, StartedAt: now, Progress: progress},
		{TaskUUID: "none", TaskName: "n", State: driver.StateStarted, Attempt: 1, CreatedAt: now},
	})...); err != nil {
		t.Fatal(err)
	}
	st, err := b.GetState(ctx, "p")
	if err != nil || string(st.Progress) != string(progress) {
		t.Fatalf("GetState: progress %q, %v; want %q byte for byte (TaskState.Progress)", st.Progress, err, progress)
	}
	if st, err := b.GetState(ctx, "none"); err != nil || st.Progress != nil {
		t.Fatalf("GetState of a state without progress: %q, %v; want none", st.Progress, err)
	}
	if err := b.InitGroup(ctx, "g", []string{"p", "none"}); err != nil {
		t.Fatal(err)
	}
	sts, err := b.GroupStates(ctx, "g")
	if err != nil || len(sts) != 2 || string(sts[0].Progress) != string(progress) || sts[1].Progress != nil {
		t.Fatalf("GroupStates = %v, %v; want the first member's progress %q byte for byte, none for the second", sts, err, progress)
	}
	started := &driver.TaskState{TaskUUID: "p", TaskName: "n", State: driver.StateStarted, Attempt: 2, CreatedAt: now, StartedAt: now}
	received := *started
	received.State = driver.StateReceived
	res := b.(driver.Starter).Start(ctx, []driver.StartRequest{{Received: &received, Started: started}})
	if res[0].Err != nil || !res[0].Written || res[0].Prev == nil || string(res[0].Prev.Progress) != string(progress) {
		t.Fatalf("Start = %+v; want written, Prev carrying progress %q byte for byte", res[0], progress)
	}
}

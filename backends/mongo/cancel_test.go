package mongobackend_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/errand-go/errand"
	mongobackend "github.com/errand-go/errand/backends/mongo"
	"github.com/errand-go/errand/driver"
)

// In machinery's format a cancel is what machinery's readers know, a
// FAILURE with the Error "errand: task cancelled" and a delete_at, read
// back by errand as CANCELLED, and kept: a worker's late SUCCESS is
// refused with ErrCancelled.
func TestMachineryCancel(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	db := "mkit" + strings.ToLower(rand.Text()[:10])
	defer c.Database(db).Drop(ctx)
	b := mongobackend.NewMachinery(c, &mongobackend.MachineryOptions{Database: db, ResultsExpireIn: time.Hour})
	defer b.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{{TaskUUID: "run", TaskName: "x", State: errand.StateStarted, Attempt: 1, CreatedAt: now, StartedAt: now}})...); err != nil {
		t.Fatal(err)
	}
	res := b.Cancel(ctx, []*errand.TaskState{{TaskUUID: "run", State: errand.StateCancelled, Error: "errand: task cancelled", ErrorKind: "cancelled", CreatedAt: now, FinishedAt: now}})
	if res[0].Err != nil || !res[0].Written || res[0].Prev == nil || res[0].Prev.State != errand.StateStarted {
		t.Fatalf("Cancel = %+v; want written over STARTED", res[0])
	}
	var doc bson.M
	if err := c.Database(db).Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: "run"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc["state"] != "FAILURE" || doc["error"] != "errand: task cancelled" || doc["error_kind"] != "cancelled" || doc["delete_at"] == nil || doc["task_name"] != "x" {
		t.Errorf("machinery's document of a cancelled task = %v; want state FAILURE, error %q, a delete_at, its task_name (what machinery's readers know), error_kind cancelled (errand's mark)", doc, "errand: task cancelled")
	}
	st, err := b.GetState(ctx, "run")
	if err != nil || st.State != errand.StateCancelled || st.Error != "errand: task cancelled" || st.Attempt != 1 || st.FinishedAt.Before(st.CreatedAt) {
		t.Errorf("GetState of a cancelled task = %+v, %v; want CANCELLED, attempt 1, its error", st, err)
	}
	errs := b.SetStates(ctx, []*errand.TaskState{{TaskUUID: "run", TaskName: "x", State: errand.StateSuccess, Attempt: 1, CreatedAt: now, FinishedAt: now}})
	if len(errs) != 1 || !errors.Is(errs[0], driver.ErrCancelled) {
		t.Errorf("SetStates of SUCCESS over the cancel = %v; want ErrCancelled (driver.Canceller)", errs)
	}
	if st, _ := b.GetState(ctx, "run"); st == nil || st.State != errand.StateCancelled {
		t.Errorf("state after a refused SUCCESS = %+v; want CANCELLED kept", st)
	}
}

// Progress comes back byte for byte (spaces, key order and escapes as
// written) in both formats, from GetState and GroupStates.
func TestProgress(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	progress := json.RawMessage("{ \"z\": 1,\n  \"a\": \"\\u00e9\\/\" }")
	for name, h := range map[string]func() errand.Backend{
		"errand":    func() errand.Backend { return harness(c).New(t, time.Hour) },
		"machinery": func() errand.Backend { return machineryHarness(c).New(t, time.Hour) },
	} {
		b := h()
		now := time.Now().UTC()
		if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{
			{TaskUUID: "p", TaskName: "n", State: errand.StateStarted, Attempt: 1, CreatedAt: now, StartedAt: now, Progress: progress},
			{TaskUUID: "none", TaskName: "n", State: errand.StateStarted, Attempt: 1, CreatedAt: now},
		})...); err != nil {
			t.Fatal(err)
		}
		if st, err := b.GetState(ctx, "p"); err != nil || string(st.Progress) != string(progress) {
			t.Errorf("%s: GetState: progress %q, %v; want %q byte for byte (TaskState.Progress)", name, st.Progress, err, progress)
		}
		if st, err := b.GetState(ctx, "none"); err != nil || st.Progress != nil {
			t.Errorf("%s: GetState of a state without progress: %q, %v; want none", name, st.Progress, err)
		}
		if err := b.InitGroup(ctx, "g", []string{"p", "none"}); err != nil {
			t.Fatal(err)
		}
		sts, err := b.GroupStates(ctx, "g")
		if err != nil || len(sts) != 2 || string(sts[0].Progress) != string(progress) || sts[1].Progress != nil {
			t.Errorf("%s: GroupStates = %v, %v; want the first member's progress %q byte for byte", name, sts, err, progress)
		}
	}
}

package memcachebackend_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memcachebackend "github.com/errand-go/errand/backends/memcache"
)

// Progress comes back byte for byte (spaces, key order and escapes as the
// task wrote them, which JSON encoding would compact) from GetState and
// GroupStates; a state without progress has none.
func TestProgress(t *testing.T) {
	ctx := context.Background()
	b := memcachebackend.New(client(t), &memcachebackend.Options{Prefix: "errand-test", ResultExpiry: time.Hour})
	defer b.Close()
	progress := json.RawMessage("{ \"z\": 1,\n  \"a\": \"\\u00e9\\/<\" }")
	id, none, g := rand.Text(), rand.Text(), rand.Text()
	now := time.Now().UTC()
	if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{
		{TaskUUID: id, TaskName: "n", State: errand.StateStarted, Attempt: 1, CreatedAt: now, StartedAt: now, Progress: progress},
		{TaskUUID: none, TaskName: "n", State: errand.StateStarted, Attempt: 1, CreatedAt: now},
	})...); err != nil {
		t.Fatal(err)
	}
	if st, err := b.GetState(ctx, id); err != nil || string(st.Progress) != string(progress) || st.State != errand.StateStarted || st.Attempt != 1 {
		t.Fatalf("GetState = %+v, %v; want STARTED attempt 1 with progress %q byte for byte (TaskState.Progress)", st, err, progress)
	}
	if st, err := b.GetState(ctx, none); err != nil || st.Progress != nil {
		t.Fatalf("GetState of a state without progress: %q, %v; want none", st.Progress, err)
	}
	if err := b.InitGroup(ctx, g, []string{id, none}); err != nil {
		t.Fatal(err)
	}
	sts, err := b.GroupStates(ctx, g)
	if err != nil || len(sts) != 2 || string(sts[0].Progress) != string(progress) || sts[1].Progress != nil {
		t.Fatalf("GroupStates = %v, %v; want the first member's progress %q byte for byte", sts, err, progress)
	}
}

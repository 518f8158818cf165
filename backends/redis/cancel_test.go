package redisbackend_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

// cancelOf is the CANCELLED state errand's Server.Cancel records for id.
func cancelOf(id string) *driver.TaskState {
	now := time.Now().UTC()
	return &driver.TaskState{TaskUUID: id, State: driver.StateCancelled, Error: "errand: task cancelled", ErrorKind: "cancelled", CreatedAt: now, FinishedAt: now}
}

// TestCancelOverStatesOfAnotherLayout: the cancel script keeps the task's
// name, attempt and CreatedAt of a state it cannot read with its anchored
// pattern — keys in another order, a name JSON escapes — and of a state
// in its own layout; the state it writes reads back as CANCELLED with
// them, and a worker's SUCCESS then does not replace it, in one call or
// a batch.
func TestCancelOverStatesOfAnotherLayout(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test-cancel", ResultExpiry: time.Minute})
	loc := b.Location().(*redisconn.States)
	created := time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC) // a producer's clock ahead of this one
	for _, c := range []struct {
		what, name string
		sorted     bool
	}{
		{"its own layout", "add", false},
		{"keys in another order", "add", true},
		{"a name JSON escapes", `a"b\c/<d>é`, false},
		{"both", `a"b\c/<d>é`, true},
	} {
		id := "cancel-" + rand.Text()
		prev := &driver.TaskState{TaskUUID: id, TaskName: c.name, State: driver.StateStarted, Attempt: 4, CreatedAt: created, StartedAt: created}
		v, _ := json.Marshal(prev)
		if c.sorted {
			var m map[string]any
			if err := json.Unmarshal(v, &m); err != nil {
				t.Fatal(err)
			}
			v, _ = json.Marshal(m)
		}
		if err := rdb.Set(ctx, loc.StateKey(id), v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		res := b.Cancel(ctx, []*driver.TaskState{cancelOf(id)})
		if len(res) != 1 || res[0].Err != nil || !res[0].Written || res[0].Prev == nil || res[0].Prev.TaskName != c.name {
			t.Fatalf("%s: Cancel = %+v; want written over the STARTED state %+v", c.what, res, prev)
		}
		got, err := b.GetState(ctx, id)
		switch {
		case err != nil:
			t.Fatalf("%s: GetState after Cancel: %v (stored %s)", c.what, err, rdb.Get(ctx, loc.StateKey(id)).Val())
		case got.State != driver.StateCancelled || got.TaskName != c.name || got.Attempt != 4 || !got.CreatedAt.Equal(created) || got.FinishedAt.Before(created):
			t.Errorf("%s: after Cancel the task reads %+v; want CANCELLED keeping name %q, attempt 4, CreatedAt %v, finished no earlier", c.what, got, c.name, created)
		}
		late := &driver.TaskState{TaskUUID: id, TaskName: c.name, State: driver.StateSuccess, Attempt: 4, CreatedAt: created}
		for _, batch := range [][]*driver.TaskState{{late}, {late, {TaskUUID: id + "-other", State: driver.StateSuccess}}} {
			errs := b.SetStates(ctx, batch)
			if len(errs) != len(batch) || !errors.Is(errs[0], driver.ErrCancelled) {
				t.Errorf("%s: SetStates of SUCCESS over the cancel (batch of %d) answered %v; want ErrCancelled for it", c.what, len(batch), errs)
			}
		}
		if got, err := b.GetState(ctx, id); err != nil || got.State != driver.StateCancelled {
			t.Errorf("%s: after a late SUCCESS the task reads %+v, %v; want CANCELLED", c.what, got, err)
		}
		rdb.Del(ctx, loc.StateKey(id), loc.StateKey(id+"-other"))
	}
}

// TestMachineryCancelIsAFailure: in machinery's format a cancel is
// machinery's FAILURE, its Error the canceller's, which machinery's own
// readers take for finished, and errand reads back as CANCELLED; it is
// written over a state machinery itself recorded (no Attempt), keeping
// its name and CreatedAt, never over a machinery worker's SUCCESS or
// FAILURE; a later SetStates of a worker's state leaves it, a PENDING
// replaces it.
func TestMachineryCancelIsAFailure(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := redisbackend.NewMachinery(rdb, &redisbackend.MachineryOptions{ResultsExpireIn: time.Minute})
	created := "2026-01-02T03:04:05.123456+01:00" // machinery writes local times
	machineryState := func(id, state string) string {
		return `{"TaskUUID":"` + id + `","TaskName":"add","State":"` + state + `","Results":null,"Error":"","CreatedAt":"` + created + `","TTL":0}`
	}
	for _, prev := range []string{"PENDING", "RECEIVED", "STARTED", "RETRY", "SUCCESS", "FAILURE"} {
		id := "errand-mcancel-" + rand.Text()
		if err := rdb.Set(ctx, id, machineryState(id, prev), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		res := b.Cancel(ctx, []*driver.TaskState{cancelOf(id)})
		terminal := prev == "SUCCESS" || prev == "FAILURE"
		if len(res) != 1 || res[0].Err != nil || res[0].Written == terminal || res[0].Prev == nil || string(res[0].Prev.State) != prev {
			t.Fatalf("Cancel over machinery's %s = %+v; want written %v, Prev %s", prev, res, !terminal, prev)
		}
		if terminal {
			if raw := rdb.Get(ctx, id).Val(); raw != machineryState(id, prev) {
				t.Errorf("Cancel over machinery's %s changed it into %s", prev, raw)
			}
			rdb.Del(ctx, id)
			continue
		}
		// machinery's reader: its TaskState, Go field names.
		var m struct {
			TaskUUID, TaskName, State, Error string
			CreatedAt                        string
		}
		if err := json.Unmarshal([]byte(rdb.Get(ctx, id).Val()), &m); err != nil {
			t.Fatal(err)
		}
		if m.State != "FAILURE" || m.Error != "errand: task cancelled" || m.TaskName != "add" || m.CreatedAt != created {
			t.Errorf("a cancel over machinery's %s is stored as %+v; want machinery's FAILURE with Error %q, its name and CreatedAt kept (machinery's readers know SUCCESS and FAILURE alone for finished)", prev, m, "errand: task cancelled")
		}
		got, err := b.GetState(ctx, id)
		if err != nil || got.State != driver.StateCancelled || got.TaskName != "add" || got.Error != "errand: task cancelled" {
			t.Errorf("a cancel over machinery's %s reads back as %+v, %v; want CANCELLED", prev, got, err)
		}
		late := &driver.TaskState{TaskUUID: id, TaskName: "add", State: driver.StateSuccess, Attempt: 1, CreatedAt: time.Now()}
		if errs := b.SetStates(ctx, []*driver.TaskState{late}); len(errs) != 1 || !errors.Is(errs[0], driver.ErrCancelled) {
			t.Errorf("SetStates of SUCCESS over a cancel answered %v; want ErrCancelled", errs)
		}
		if got, err := b.GetState(ctx, id); err != nil || got.State != driver.StateCancelled {
			t.Errorf("after a late SUCCESS the cancelled task reads %+v, %v; want CANCELLED", got, err)
		}
		// A genuine FAILURE of errand's stays a FAILURE.
		pending := &driver.TaskState{TaskUUID: id, TaskName: "add", State: driver.StatePending, CreatedAt: time.Now()}
		failure := &driver.TaskState{TaskUUID: id, TaskName: "add", State: driver.StateFailure, Error: "errand: task cancelled", ErrorKind: "failed", CreatedAt: time.Now()}
		if err := errors.Join(b.SetStates(ctx, []*driver.TaskState{pending, failure})...); err != nil {
			t.Errorf("SetStates of PENDING (sent again), then FAILURE, over a cancel: %v; want both written", err)
		}
		if got, err := b.GetState(ctx, id); err != nil || got.State != driver.StateFailure {
			t.Errorf("a FAILURE whose kind is not the cancel's reads back as %+v, %v; want FAILURE", got, err)
		}
		rdb.Del(ctx, id)
	}
}

// TestMachineryCancelLeavesGroupMeta: machinery keeps a group's meta at
// the group's UUID, beside the tasks' states; a cancel naming that UUID
// (errand's Server.Cancel tries an id as a task first) finds no task
// there and leaves the meta as it was, so the group still completes.
func TestMachineryCancelLeavesGroupMeta(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := redisbackend.NewMachinery(rdb, &redisbackend.MachineryOptions{ResultsExpireIn: time.Minute})
	g := "errand-mcancel-group-" + rand.Text()
	defer rdb.Del(ctx, g, g+":errand-done")
	if err := b.InitGroup(ctx, g, []string{g + "-a"}); err != nil {
		t.Fatal(err)
	}
	before := rdb.Get(ctx, g).Val()
	res := b.Cancel(ctx, []*driver.TaskState{cancelOf(g)})
	if len(res) != 1 || res[0].Err != nil || res[0].Written || res[0].Prev != nil {
		t.Fatalf("Cancel of a group's UUID = %+v; want no task there: not written, no Prev, no error", res)
	}
	if after := rdb.Get(ctx, g).Val(); after != before {
		t.Fatalf("Cancel of a group's UUID changed its meta from %s to %s", before, after)
	}
	if done, total, err := b.CompleteGroupMember(ctx, g, g+"-a"); err != nil || done != 1 || total != 1 {
		t.Fatalf("completing the group after a cancel of its UUID: %d/%d, %v; want 1/1", done, total, err)
	}
}

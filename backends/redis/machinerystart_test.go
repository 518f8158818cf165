package redisbackend_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/driver"
)

// TestMachineryStartOverMachineryStates: the machinery backend begins an
// attempt in one call (driver.Starter) over states machinery itself wrote,
// which carry no Attempt: a PENDING a machinery producer recorded is
// started, keeping its CreatedAt; a STARTED a machinery worker recorded
// is not, for a first delivery (a second message under a running task's
// UUID); a SUCCESS is never.
func TestMachineryStartOverMachineryStates(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx := context.Background()
	b := redisbackend.NewMachinery(rdb, nil)
	defer b.Close()
	created := "2026-01-02T03:04:05.123456Z"
	machineryState := func(state string) string {
		return `{"TaskUUID":"u","TaskName":"add","State":"` + state + `","Results":null,"Error":"","CreatedAt":"` + created + `","TTL":0}`
	}
	for _, c := range []struct {
		prev    string
		first   bool
		written bool
	}{
		{"PENDING", true, true},
		{"RECEIVED", false, true},
		{"STARTED", true, false},
		{"STARTED", false, true},
		{"SUCCESS", false, false},
	} {
		id := "errand-mstart-" + rand.Text()
		if err := rdb.Set(ctx, id, machineryState(c.prev), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		st := &driver.TaskState{TaskUUID: id, TaskName: "add", State: driver.StateStarted, Attempt: 1, CreatedAt: now, StartedAt: now}
		rec := *st
		rec.State = driver.StateReceived
		res := b.Start(ctx, []driver.StartRequest{{Received: &rec, Started: st, FirstDelivery: c.first}})
		if len(res) != 1 || res[0].Err != nil {
			t.Fatalf("prev %s: Start = %+v", c.prev, res)
		}
		if res[0].Written != c.written || res[0].Prev == nil || string(res[0].Prev.State) != c.prev {
			t.Errorf("prev %s written by machinery, first delivery %v: written %v, prev %+v; want written %v and prev %s (driver.Starter's table)",
				c.prev, c.first, res[0].Written, res[0].Prev, c.written, c.prev)
		}
		got, err := b.GetState(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := driver.State(c.prev)
		if c.written {
			want = driver.StateStarted
		}
		if got.State != want || got.CreatedAt.Format(time.RFC3339Nano) != created {
			t.Errorf("prev %s: stored %s created %v, want %s keeping machinery's CreatedAt %s", c.prev, got.State, got.CreatedAt, want, created)
		}
		rdb.Del(ctx, id)
	}
}

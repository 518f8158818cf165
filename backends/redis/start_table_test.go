package redisbackend_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

// TestStartTable: the Start scripts (the backend's Lua copies of the start
// rule: errand's format and machinery's) decide as
// driver.StartRequest.Allows, the one definition, on every row of
// conformance.StartCases (the table the Redis broker's co-located fetch
// runs too): for errand's format with the previous state as SetStates
// writes it and with its fields in another order, and for machinery's
// format as its SetStates writes it. A refused start leaves the state as
// it was; a written one is STARTED.
func TestStartTable(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	errandBe := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test-start-table", ResultExpiry: time.Minute})
	machineryBe := redisbackend.NewMachinery(rdb, &redisbackend.MachineryOptions{ResultsExpireIn: time.Minute})
	loc := errandBe.Location().(*redisconn.States)
	created := time.Date(2020, 1, 2, 3, 4, 5, 678e6, time.UTC)
	type starter interface {
		driver.Backend
		driver.Starter
	}
	for _, sc := range conformance.StartCases() {
		for _, layout := range []string{"errand", "errand-other-order", "machinery"} {
			if sc.Prev == nil && layout == "errand-other-order" {
				continue
			}
			t.Run(sc.Name+"/"+layout, func(t *testing.T) {
				var be starter = errandBe
				if layout == "machinery" {
					be = machineryBe
				}
				id := "tab-" + rand.Text()
				var before *driver.TaskState
				if sc.Prev != nil {
					p := *sc.Prev
					p.TaskUUID, p.CreatedAt = id, created
					if layout == "errand-other-order" {
						v, _ := json.Marshal(&p)
						var m map[string]any
						if err := json.Unmarshal(v, &m); err != nil {
							t.Fatal(err)
						}
						v, _ = json.Marshal(m) // sorted keys: attempt, created_at, ...
						if err := rdb.Set(ctx, loc.StateKey(id), v, time.Minute).Err(); err != nil {
							t.Fatal(err)
						}
					} else if err := errors.Join(be.SetStates(ctx, []*driver.TaskState{&p})...); err != nil {
						t.Fatal(err)
					}
					var err error
					if before, err = be.GetState(ctx, id); err != nil {
						t.Fatal(err)
					}
				}
				at := time.Now().UTC().Truncate(time.Microsecond)
				res := be.Start(ctx, []driver.StartRequest{sc.Request(id, at)})
				if len(res) != 1 || res[0].Err != nil {
					t.Fatalf("Start: %+v; want one answer, no error", res)
				}
				// The rule is judged on the state as the backend reads it
				// back (machinery's format may not keep every field).
				want := sc.Request(id, at).Allows(before)
				if res[0].Written != want {
					t.Fatalf("previous %+v: written %v; driver.StartRequest.Allows says %v", before, res[0].Written, want)
				}
				if (res[0].Prev == nil) != (before == nil) {
					t.Fatalf("Prev %+v; want the state before (%+v)", res[0].Prev, before)
				}
				after, err := be.GetState(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case res[0].Written && (after.State != driver.StateStarted || after.Attempt != sc.Attempt || after.TaskName != sc.Task):
					t.Fatalf("a written start left %+v; want STARTED, attempt %d, task %q", after, sc.Attempt, sc.Task)
				case !res[0].Written && (after.State != before.State || after.Attempt != before.Attempt || after.TaskName != before.TaskName):
					t.Fatalf("a refused start changed the state from %+v to %+v", before, after)
				}
			})
		}
	}
}

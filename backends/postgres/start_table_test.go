package postgresbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// TestStartTable: start_states (the SQL copy of the start rule, which the
// PostgreSQL broker's co-located fetch runs too) decides as
// driver.StartRequest.Allows, the one definition, on every row of
// conformance.StartCases, one request a call and all rows in one batch.
// A refused start leaves the state as it was; a written one is STARTED
// with the previous CreatedAt, and a StartedAt no earlier than it.
func TestStartTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b := harness(t, pgdbtest.Pool(t), nil).New(t, time.Hour)
	s := b.(driver.Starter)
	created := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond) // a producer's clock ahead
	cases := conformance.StartCases()
	seed := func(prefix string) ([]string, []*driver.TaskState) {
		ids := make([]string, len(cases))
		before := make([]*driver.TaskState, len(cases))
		var sts []*driver.TaskState
		for i, sc := range cases {
			ids[i] = fmt.Sprintf("%s-%d", prefix, i)
			if sc.Prev != nil {
				p := *sc.Prev
				p.TaskUUID, p.CreatedAt = ids[i], created
				sts = append(sts, &p)
				before[i] = &p
			}
		}
		if err := errors.Join(b.SetStates(ctx, sts)...); err != nil {
			t.Fatal(err)
		}
		return ids, before
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	check := func(sc conformance.StartCase, id string, before *driver.TaskState, res driver.StartResult) {
		t.Helper()
		want := sc.Request(id, at).Allows(before)
		if res.Err != nil || res.Written != want {
			t.Errorf("%s: written %v, %v; driver.StartRequest.Allows says %v", sc.Name, res.Written, res.Err, want)
			return
		}
		if (res.Prev == nil) != (before == nil) || (before != nil && (res.Prev.State != before.State || res.Prev.Attempt != before.Attempt || res.Prev.TaskName != before.TaskName || res.Prev.Error != before.Error)) {
			t.Errorf("%s: Prev %+v; want the state before, %+v", sc.Name, res.Prev, before)
			return
		}
		after, err := b.GetState(ctx, id)
		switch {
		case !want && before == nil:
		case err != nil:
			t.Errorf("%s: GetState after Start: %v", sc.Name, err)
		case want && (after.State != driver.StateStarted || after.Attempt != sc.Attempt || after.TaskName != sc.Task):
			t.Errorf("%s: a written start left %+v; want STARTED, attempt %d, task %q", sc.Name, after, sc.Attempt, sc.Task)
		case want && before != nil && (!after.CreatedAt.Equal(created) || !after.StartedAt.Equal(created)):
			t.Errorf("%s: a written start over a state created at %v (ahead of the worker) has CreatedAt %v, StartedAt %v; want both %v", sc.Name, created, after.CreatedAt, after.StartedAt, created)
		case want && before == nil && (!after.CreatedAt.Equal(at) || !after.StartedAt.Equal(at)):
			t.Errorf("%s: a first start has CreatedAt %v, StartedAt %v; want the request's %v", sc.Name, after.CreatedAt, after.StartedAt, at)
		case !want && (after.State != before.State || after.Attempt != before.Attempt || after.TaskName != before.TaskName || after.Error != before.Error):
			t.Errorf("%s: a refused start changed the state from %+v to %+v", sc.Name, before, after)
		}
	}
	ids, before := seed("one")
	for i, sc := range cases {
		res := s.Start(ctx, []driver.StartRequest{sc.Request(ids[i], at)})
		if len(res) != 1 {
			t.Fatalf("%s: %d answers for one request", sc.Name, len(res))
		}
		check(sc, ids[i], before[i], res[0])
	}
	ids, before = seed("batch")
	reqs := make([]driver.StartRequest, len(cases))
	for i := range reqs {
		reqs[i] = cases[i].Request(ids[i], at)
	}
	// Reverse the batch so the backend must answer in request order.
	for i, j := 0, len(reqs)-1; i < j; i, j = i+1, j-1 {
		reqs[i], reqs[j] = reqs[j], reqs[i]
	}
	res := s.Start(ctx, reqs)
	if len(res) != len(reqs) {
		t.Fatalf("%d answers for a batch of %d", len(res), len(reqs))
	}
	for k := range reqs {
		i := len(cases) - 1 - k
		check(cases[i], ids[i], before[i], res[k])
	}
}

package postgresbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// Batches of Start and SetStates sharing tasks, each in another request
// order, run at once: each locks the rows of its batch in one order (the
// tasks' UUIDs, byte order), so none waits for another in a cycle (which
// the server would break by failing one with a deadlock error).
func TestBatchesNeverDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := harness(t, pgdbtest.Pool(t), nil).New(t, 0)
	s := b.(driver.Starter)
	const n, rounds = 20, 30
	for round := range rounds {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d-%c%d", round, 'a'+i%3, i) // request order differs from UUID order
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3*n)
		start := func(ids []string) {
			reqs := make([]driver.StartRequest, len(ids))
			for i, id := range ids {
				st := &driver.TaskState{TaskUUID: id, TaskName: "lock", State: driver.StateStarted, Attempt: 1, CreatedAt: time.Now()}
				reqs[i] = driver.StartRequest{Received: st, Started: st}
			}
			for _, r := range s.Start(ctx, reqs) {
				if r.Err != nil {
					errs <- r.Err
				}
			}
		}
		set := func(ids []string) {
			var sts []*driver.TaskState
			for _, id := range ids {
				sts = append(sts, &driver.TaskState{TaskUUID: id, TaskName: "lock", State: driver.StateSuccess, CreatedAt: time.Now()})
			}
			if err := errors.Join(b.SetStates(ctx, sts)...); err != nil {
				errs <- err
			}
		}
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		wg.Go(func() { start(ids) })
		wg.Go(func() { start(rev) })
		wg.Go(func() { set(rev) })
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: batches sharing tasks in other orders failed: %v; want each to lock its rows in UUID order, never deadlocking", round, err)
		}
	}
}

package postgresbackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// Start begins the attempts of reqs in one statement: start_states
// (internal/pgdb's schema_backend.go) reads each task's state, locking
// its row, decides by driver.Starter's table, and writes the STARTED
// state where allowed, with the previous state's CreatedAt and a
// StartedAt no earlier than it. Only STARTED is stored: a row holds the
// current state alone, and nobody reads RECEIVED between two writes of
// one statement. The requests go to the server in the order of their
// task UUIDs (requests of one task in request order), so that two
// batches lock the rows they share in the same order and never deadlock.
func (b *Backend) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	out := make([]driver.StartResult, len(reqs))
	if b.closed.Load() {
		return driver.StartFailed(len(reqs), b.err(ctx, "start", driver.ErrClosed))
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return compareStrings(reqs[i].Started.TaskUUID, reqs[j].Started.TaskUUID)
	})
	var a pgdb.StateArgs
	var firsts []bool
	var run []int // run[k]: the request of the statement's (k+1)-th row
	for _, i := range order {
		if err := a.Append(reqs[i].Started); err != nil {
			out[i].Err = fmt.Errorf("postgres backend: %w", err)
			continue
		}
		firsts = append(firsts, reqs[i].FirstDelivery)
		run = append(run, i)
	}
	if len(run) == 0 {
		return out
	}
	fail := func(err error) []driver.StartResult {
		for _, i := range run {
			out[i].Err = err
		}
		return out
	}
	rows, err := b.pool.Query(ctx, pgdb.StartStatesSQL(b.opts.Schema), pgdb.StartArgs(&a, firsts, b.opts.ResultExpiry)...)
	if err != nil {
		return fail(b.err(ctx, "start", err))
	}
	defer rows.Close()
	answered := 0
	for rows.Next() {
		var ord int32
		var written bool
		var body *string
		var c, s, f *time.Time
		var p *string
		if err := rows.Scan(&ord, &written, &body, &c, &s, &f, &p); err != nil {
			return fail(b.err(ctx, "start", err))
		}
		if ord < 1 || int(ord) > len(run) {
			return fail(fmt.Errorf("postgres backend: start: row %d answers no request of %d", ord, len(run)))
		}
		i := run[ord-1]
		out[i].Written = written
		if body != nil {
			if out[i].Prev, err = pgdb.DecodeState(reqs[i].Started.TaskUUID, *body, c, s, f, p); err != nil {
				out[i] = driver.StartResult{Written: written, Err: fmt.Errorf("postgres backend: %w", err)}
			}
		}
		answered++
	}
	if err := rows.Err(); err != nil {
		return fail(b.err(ctx, "start", err))
	}
	if answered != len(run) {
		return fail(fmt.Errorf("postgres backend: start: %d answers for %d requests", answered, len(run)))
	}
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

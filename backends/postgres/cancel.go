package postgresbackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// Cancel records CANCELLED for each of sts in one statement
// (driver.Canceller): cancel_states (internal/pgdb's schema_backend.go)
// reads each task's live state, locking its row, and unless the task has
// none or it is terminal writes CANCELLED with sts[i]'s Error, ErrorKind
// and ErrorDetail, keeping the task's TaskName, Attempt, CreatedAt
// (sts[i]'s when it has none), StartedAt and Progress (sts[i]'s when
// set), with a FinishedAt no earlier than its CreatedAt and StartedAt,
// restarting its result expiry and waking its waiters. The tasks go to
// the server in the order of their UUIDs, as Start's do, so that two
// batches lock the rows they share in one order. Once CANCELLED, no
// write of the backend replaces the state but a PENDING (SetStates, a
// co-located settle; Start refuses it as any terminal state).
func (b *Backend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	fail := func(run []int, err error) []driver.CancelResult {
		for _, i := range run {
			out[i] = driver.CancelResult{Err: err}
		}
		return out
	}
	all := make([]int, len(sts))
	for i := range all {
		all[i] = i
	}
	if b.closed.Load() {
		return fail(all, b.err(ctx, "cancel", driver.ErrClosed))
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	all = slices.DeleteFunc(all, func(i int) bool {
		if sts[i] == nil {
			out[i].Err = fmt.Errorf("postgres backend: cancel: state %d of the batch is nil", i)
		}
		return sts[i] == nil
	})
	slices.SortStableFunc(all, func(i, j int) int { return compareStrings(sts[i].TaskUUID, sts[j].TaskUUID) })
	var a pgdb.CancelArgs
	var run []int // run[k]: the state of the statement's (k+1)-th row
	for _, i := range all {
		if err := a.Append(sts[i]); err != nil {
			out[i].Err = fmt.Errorf("postgres backend: %w", err)
			continue
		}
		run = append(run, i)
	}
	if len(run) == 0 {
		return out
	}
	rows, err := b.pool.Query(ctx, pgdb.CancelStatesSQL(b.opts.Schema), append(a.Args(), b.opts.ResultExpiry)...)
	if err != nil {
		return fail(run, b.err(ctx, "cancel", err))
	}
	defer rows.Close()
	answered := 0
	for rows.Next() {
		var ord int32
		var written bool
		var body, p *string
		var c, s, f *time.Time
		if err := rows.Scan(&ord, &written, &body, &c, &s, &f, &p); err != nil {
			return fail(run, b.err(ctx, "cancel", err))
		}
		if ord < 1 || int(ord) > len(run) {
			return fail(run, fmt.Errorf("postgres backend: cancel: row %d answers no task of %d", ord, len(run)))
		}
		i := run[ord-1]
		out[i].Written = written
		if body != nil {
			if out[i].Prev, err = pgdb.DecodeState(sts[i].TaskUUID, *body, c, s, f, p); err != nil {
				out[i] = driver.CancelResult{Err: fmt.Errorf("postgres backend: cancel (CANCELLED written: %v): %w", written, err)}
			}
		}
		answered++
	}
	if err := rows.Err(); err != nil {
		return fail(run, b.err(ctx, "cancel", err))
	}
	if answered != len(run) {
		return fail(run, fmt.Errorf("postgres backend: cancel: %d answers for %d tasks", answered, len(run)))
	}
	return out
}

package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

// brokenStart is the memory backend with a broken driver.Starter or
// driver.PendingWriter.
type brokenStart struct {
	*memorybackend.Backend
	start   func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult
	pending func(b *brokenStart, ctx context.Context, sts []*errand.TaskState) []error
}

func (b *brokenStart) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	if b.start != nil {
		return b.start(b, ctx, reqs)
	}
	return b.Backend.Start(ctx, reqs)
}

func (b *brokenStart) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) []error {
	if b.pending != nil {
		return b.pending(b, ctx, sts)
	}
	return b.Backend.SetPendingIfAbsent(ctx, sts)
}

func brokenStartHarness(mod func(b *brokenStart)) BackendHarness {
	h := healthyBackend()
	h.New = func(t testing.TB, expiry time.Duration) errand.Backend {
		b := &brokenStart{Backend: memorybackend.New(&memorybackend.Options{ResultExpiry: expiry})}
		mod(b)
		t.Cleanup(func() { b.Backend.Close() })
		return b
	}
	return h
}

// readThenWrite is Start as a read and then a write from Go, with a pause
// between them; keepCreated: the written states keep prev's CreatedAt.
func readThenWrite(b *brokenStart, ctx context.Context, reqs []driver.StartRequest, pause time.Duration, ignore, keepCreated bool) []driver.StartResult {
	out := make([]driver.StartResult, len(reqs))
	for i, r := range reqs {
		prev, err := b.Backend.GetState(ctx, r.Started.TaskUUID)
		if err != nil {
			prev = nil
		}
		out[i].Prev = prev
		time.Sleep(pause)
		if !ignore && !r.Allows(prev) {
			continue
		}
		rec, st := r.Received.Copy(), r.Started.Copy()
		if prev != nil && keepCreated {
			rec.CreatedAt, st.CreatedAt = prev.CreatedAt, prev.CreatedAt
		}
		if err := errors.Join(b.Backend.SetStates(ctx, []*errand.TaskState{rec, st})...); err != nil {
			out[i].Err = err
			continue
		}
		out[i].Written = true
	}
	return out
}

var brokenStarts = map[string]BackendHarness{
	// Writes STARTED whatever the previous state (a plain SET).
	"start-ignores-condition": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			return readThenWrite(b, ctx, reqs, 0, true, true)
		}
	}),
	// Reads, then writes in a second step: racing Starts all find no state.
	"start-not-atomic": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			return readThenWrite(b, ctx, reqs, 2*time.Millisecond, false, true)
		}
	}),
	// Keeps the previous state's CreatedAt but writes the request's own
	// StartedAt even when it is earlier (a producer's clock ahead).
	"start-before-created": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			return readThenWrite(b, ctx, reqs, 0, false, true)
		}
	}),
	// Writes the request's own CreatedAt over the previous state's.
	"start-resets-created-at": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			return readThenWrite(b, ctx, reqs, 0, false, false)
		}
	}),
	// Reads every request's state, then writes: two requests of one task
	// in a batch both find no state.
	"start-batch-reads-first": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			out := make([]driver.StartResult, len(reqs))
			for i, r := range reqs {
				if prev, err := b.Backend.GetState(ctx, r.Started.TaskUUID); err == nil {
					out[i].Prev = prev
				}
			}
			for i, r := range reqs {
				if !r.Allows(out[i].Prev) {
					continue
				}
				if err := errors.Join(b.Backend.SetStates(ctx, []*errand.TaskState{r.Received, r.Started})...); err != nil {
					out[i].Err = err
					continue
				}
				out[i].Written = true
			}
			return out
		}
	}),
	// Answers a batch in reverse order (a pipeline read back wrongly).
	"start-batch-reversed": brokenStartHarness(func(b *brokenStart) {
		b.start = func(b *brokenStart, ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
			res := b.Backend.Start(ctx, reqs)
			slices.Reverse(res)
			return res
		}
	}),
	// A plain SET: PENDING overwrites whatever a worker recorded.
	"pending-overwrites": brokenStartHarness(func(b *brokenStart) {
		b.pending = func(b *brokenStart, ctx context.Context, sts []*errand.TaskState) []error {
			return b.Backend.SetStates(ctx, sts)
		}
	}),
}

func init() {
	for name, h := range brokenStarts {
		brokenBackends[name] = h
	}
	backendTargets["Start/Table"] = "start-ignores-condition"
	backendTargets["Start/Batch"] = "start-batch-reversed"
	backendTargets["Start/SameTask"] = "start-batch-reads-first"
	backendTargets["Start/Concurrent"] = "start-not-atomic"
	backendTargets["State/PendingIfAbsent"] = "pending-overwrites"
	backendTargets["Start/NeverBeforeCreated"] = "start-before-created"
	moreBackendTargets["Start/Table"] = "start-resets-created-at"
}

// TestStartTablesFollowTheRule: the kit's own table of driver.Starter
// (Backend/Start, Worker/Colocation/Start) answers as the one definition
// of the rule, driver.StartRequest.Allows, row by row; and the rows
// StartCases gives drivers to check their copies of the rule against are
// each named once.
func TestStartTablesFollowTheRule(t *testing.T) {
	t.Parallel()
	for _, r := range startRows() {
		req := startRequest("id", r, time.Now())
		if got := req.Allows(r.prev); got != r.writes {
			t.Errorf("row %q: the kit's table says writes=%v, driver.StartRequest.Allows says %v", r.what, r.writes, got)
		}
	}
	seen := map[string]bool{}
	allowed := 0
	for _, c := range StartCases() {
		if seen[c.Name] {
			t.Errorf("StartCases names %q twice", c.Name)
		}
		seen[c.Name] = true
		if c.Want() {
			allowed++
		}
	}
	if allowed == 0 || allowed == len(seen) {
		t.Errorf("StartCases: %d of %d rows allowed; want both answers among them", allowed, len(seen))
	}
}

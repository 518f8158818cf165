package mongobackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand/driver"
)

// cancelTries bounds the tries of one task's cancel: a try that finds
// the task unfinished but not matched (its CreatedAt or StartedAt after
// the canceller's FinishedAt, or its state changing under it) tries again
// with what it read.
const cancelTries = 3

// Cancel records CANCELLED for each of sts, one task after the other
// (driver.Canceller): per task one findAndModify filtered on "live, not
// SUCCESS, FAILURE or CANCELLED, created and started no later than the
// cancel's FinishedAt", which sets the state, the canceller's Error,
// ErrorKind, ErrorDetail and FinishedAt (and Progress when it has one)
// and restarts the expiry, keeping the task's name, attempt, CreatedAt,
// StartedAt and progress, and returns the document as it was. When it
// matches nothing, a read tells a task without a state or a finished one
// (nothing written) from one whose times are after the canceller's clock,
// cancelled again with a FinishedAt no earlier than them.
//
// Each cancel is one atomic update of one document on MongoDB, and
// SetStates then writes nothing but a PENDING over it (its filter leaves
// a live CANCELLED out). FerretDB v1 does not make a single-document
// update atomic across connections: there the promise holds for the
// writes of one connection only (the tests' maxPoolSize=1).
func (b *Backend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	if err := b.check(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i, st := range sts {
		out[i] = b.cancel(ctx, st)
	}
	return out
}

func (b *Backend) cancel(ctx context.Context, st *driver.TaskState) driver.CancelResult {
	if st == nil {
		return driver.CancelResult{Err: errors.New("mongo backend: cancel of a nil state")}
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	fin := st.FinishedAt
	if fin.IsZero() {
		fin = time.Now()
	}
	for range cancelTries {
		now := time.Now()
		filter := bson.D{{Key: "_id", Value: st.TaskUUID}, live(now),
			{Key: "state", Value: bson.D{{Key: "$nin", Value: bson.A{string(driver.StateSuccess), string(driver.StateFailure), string(driver.StateCancelled)}}}},
			{Key: "created_at", Value: bson.D{{Key: "$lte", Value: fin}}},
			{Key: "started_at", Value: bson.D{{Key: "$lte", Value: fin}}},
		}
		set := bson.D{{Key: "state", Value: string(driver.StateCancelled)}, {Key: "results", Value: bson.A{}},
			{Key: "error", Value: st.Error}, {Key: "error_kind", Value: st.ErrorKind}, {Key: "error_detail", Value: st.ErrorDetail},
			{Key: "finished_at", Value: fin}, {Key: "expires_at", Value: now.Add(b.opts.ResultExpiry)}}
		if len(st.Progress) > 0 {
			set = append(set, bson.E{Key: "progress", Value: string(st.Progress)})
		}
		var prev taskDoc
		err := b.tasks.FindOneAndUpdate(cctx, filter, bson.D{{Key: "$set", Value: set}},
			options.FindOneAndUpdate().SetReturnDocument(options.Before)).Decode(&prev)
		if err == nil {
			return driver.CancelResult{Prev: prev.state(), Written: true}
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return driver.CancelResult{Err: b.err(ctx, err)}
		}
		err = b.tasks.FindOne(cctx, bson.D{{Key: "_id", Value: st.TaskUUID}, live(now)}).Decode(&prev)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return driver.CancelResult{}
		}
		if err != nil {
			return driver.CancelResult{Err: b.err(ctx, err)}
		}
		p := prev.state()
		if p.State.Terminal() {
			return driver.CancelResult{Prev: p}
		}
		fin = latest(fin, p.CreatedAt, p.StartedAt)
	}
	return driver.CancelResult{Err: fmt.Errorf("mongo backend: cancel of task %s: its state changed under %d tries", st.TaskUUID, cancelTries)}
}

// cancelMark is how a document format marks a task's live cancel, in
// filters at time now: not, the $or clauses a document that is no live
// cancel meets; is, the fields (beside _id) of one that is.
type cancelMark struct {
	not func(now time.Time) bson.A
	is  func(now time.Time) bson.D
}

// replaceUnlessCancelled replaces st's task document with doc(now)
// (upsert), unless st is not PENDING and the task holds a live cancel
// (mark). The filter then matches nothing and the upsert's insert meets
// the document's _id: only that duplicate key error costs a second round
// trip, a read telling a cancel (kept: nothing written) from an insert
// racing ours (written again, three tries in all). err is the server's,
// for the caller to wrap.
func replaceUnlessCancelled(ctx context.Context, tasks *mongo.Collection, st *driver.TaskState, mark cancelMark, doc func(now time.Time) any) (kept bool, err error) {
	for try := 1; ; try++ {
		now := time.Now()
		filter := bson.D{{Key: "_id", Value: st.TaskUUID}}
		if st.State != driver.StatePending {
			filter = append(filter, bson.E{Key: "$or", Value: mark.not(now)})
		}
		_, err := tasks.ReplaceOne(ctx, filter, doc(now), options.Replace().SetUpsert(true))
		if err == nil || !mongo.IsDuplicateKeyError(err) || st.State == driver.StatePending || try == 3 {
			return false, err
		}
		n, err := tasks.CountDocuments(ctx, append(bson.D{{Key: "_id", Value: st.TaskUUID}}, mark.is(now)...))
		if err != nil {
			return false, err
		}
		if n > 0 {
			return true, nil
		}
	}
}

// latest is the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

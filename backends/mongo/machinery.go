package mongobackend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand/driver"
)

// MachineryOptions configures a [MachineryBackend].
type MachineryOptions struct {
	// Database holds machinery's collections (config MongoDB.Database).
	// Default: "machinery", machinery's.
	Database string
	// ResultsExpireIn is how long a final state (SUCCESS, FAILURE) is kept
	// after it is written (machinery's results_expire_in), as delete_at,
	// the field machinery's TTL index expires; errand also checks it on
	// read. Other states carry no delete_at and never expire, as in
	// machinery. Default: 1h.
	ResultsExpireIn time.Duration
	// CallTimeout bounds each call. Default: 10s.
	CallTimeout time.Duration
	// CloseClient: Close also disconnects the client. Default: false.
	CloseClient bool
}

// MachineryBackend is a [driver.Backend] on machinery v2's MongoDB result
// backend's collections, so that an unchanged machinery producer reads the
// states and results errand workers record (docs/migrating-from-machinery.md).
//
// A task is a document of the tasks collection, as machinery writes it
// (_id the task UUID, task_name, state, results of {type, value}, error,
// created_at, and delete_at once SUCCESS or FAILURE) plus errand's
// attempt, error_kind, error_detail, started_at and finished_at. Result values are stored as BSON values of
// their type, integers as 64-bit, as machinery's own results are, so its
// AsyncResult reflects them. A group is a document of group_metas (_id,
// task_uuids, chord_triggered, lock, created_at).
//
// CompleteGroupMember keeps errand's completions in the group's
// errand_done list and counts a member done when it is there or its state
// is SUCCESS or FAILURE: O(group size) on the server, since machinery's
// format has no counter (machinery reads every member state). ClaimChord
// is one findAndModify setting chord_triggered (and
// errand_chord_claimer) where it is false. machinery's own Mongo
// TriggerChord reports a win even when its update matched nothing
// (v2.0.16), so machinery workers on this backend can fire a chord twice
// whatever errand does: do not mix machinery and errand workers on
// chords over the Mongo backend.
type MachineryBackend struct {
	client        *mongo.Client
	opts          MachineryOptions
	tasks, groups *mongo.Collection
	closed        atomic.Bool
}

var (
	_ driver.Backend   = (*MachineryBackend)(nil)
	_ driver.Expirer   = (*MachineryBackend)(nil)
	_ driver.Canceller = (*MachineryBackend)(nil)
)

// NewMachinery returns a backend on machinery's collections.
func NewMachinery(client *mongo.Client, opts *MachineryOptions) *MachineryBackend {
	var o MachineryOptions
	if opts != nil {
		o = *opts
	}
	if o.Database == "" {
		o.Database = "machinery"
	}
	if o.ResultsExpireIn <= 0 {
		o.ResultsExpireIn = time.Hour
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	db := client.Database(o.Database)
	return &MachineryBackend{client: client, opts: o, tasks: db.Collection("tasks"), groups: db.Collection("group_metas")}
}

type mTaskDoc struct {
	ID          string       `bson:"_id"`
	TaskName    string       `bson:"task_name"`
	State       string       `bson:"state"`
	Results     []mResultDoc `bson:"results"`
	Error       string       `bson:"error"`
	CreatedAt   time.Time    `bson:"created_at"`
	DeleteAt    time.Time    `bson:"delete_at,omitempty"`
	Attempt     int          `bson:"attempt,omitempty"`
	ErrorKind   string       `bson:"error_kind,omitempty"`
	ErrorDetail string       `bson:"error_detail,omitempty"`
	StartedAt   time.Time    `bson:"started_at,omitempty"`
	FinishedAt  time.Time    `bson:"finished_at,omitempty"`
	Progress    string       `bson:"progress,omitempty"`
}

type mResultDoc struct {
	Type  string `bson:"type"`
	Value any    `bson:"value"`
}

type mGroupDoc struct {
	ID             string    `bson:"_id"`
	TaskUUIDs      []string  `bson:"task_uuids"`
	ChordTriggered bool      `bson:"chord_triggered"`
	Lock           bool      `bson:"lock"`
	CreatedAt      time.Time `bson:"created_at"`
	Claimer        string    `bson:"errand_chord_claimer,omitempty"`
	Done           []string  `bson:"errand_done,omitempty"`
}

// ResultExpiry returns ResultsExpireIn.
func (b *MachineryBackend) ResultExpiry() time.Duration { return b.opts.ResultsExpireIn }

func (b *MachineryBackend) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if b.closed.Load() {
		return nil, nil, fmt.Errorf("mongo machinery backend: %w", driver.ErrClosed)
	}
	c, cancel := context.WithTimeout(ctx, b.opts.CallTimeout)
	return c, cancel, nil
}

// bsonValue turns a result's JSON into the BSON value machinery stores:
// integer types as int64, other numbers as float64, the rest as JSON
// decodes it.
func bsonValue(typ string, raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	elem := strings.TrimPrefix(typ, "[]")
	isInt := strings.HasPrefix(elem, "int") || strings.HasPrefix(elem, "uint")
	var conv func(any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			if isInt {
				if n, err := x.Int64(); err == nil {
					return n
				}
			}
			f, _ := x.Float64()
			return f
		case []any:
			for i := range x {
				x[i] = conv(x[i])
			}
			return x
		case map[string]any:
			for k := range x {
				x[k] = conv(x[k])
			}
			return x
		}
		return v
	}
	return conv(v), nil
}

// SetStates upserts each state into machinery's tasks collection. A
// CANCELLED is stored as machinery's FAILURE (machinery knows no other
// final states), its Error the canceller's ("errand: task cancelled";
// cancelledError when it has none), marked with errand's error_kind
// "cancelled", which errand reads back as CANCELLED. A state other than PENDING is not written
// over a live cancel (the upsert's filter leaves it out, see Cancel): it
// fails alone with an error wrapping driver.ErrCancelled.
func (b *MachineryBackend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(sts))
		}
		errs[i] = err
	}
	for i, st := range sts {
		doc := mTaskDoc{ID: st.TaskUUID, TaskName: st.TaskName, State: string(st.State), Error: st.Error, CreatedAt: st.CreatedAt.UTC(),
			Attempt: st.Attempt, ErrorKind: st.ErrorKind, ErrorDetail: st.ErrorDetail,
			StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, Progress: string(st.Progress)}
		if st.State == driver.StateCancelled { // machinery's FAILURE, marked
			doc.State, doc.ErrorKind = string(driver.StateFailure), cancelledKind
			if doc.Error == "" {
				doc.Error = cancelledError
			}
		}
		if st.State.Terminal() {
			// Only a final state expires, as machinery's SetStateSuccess
			// and SetStateFailure set delete_at: a long task or a retry
			// delayed past the expiry keeps its document.
			doc.DeleteAt = time.Now().Add(b.opts.ResultsExpireIn).UTC()
		}
		if st.State == driver.StateSuccess {
			doc.Results = []mResultDoc{}
		}
		var bad error
		for _, r := range st.Results {
			v, err := bsonValue(r.Type, r.Value)
			if err != nil {
				bad = fmt.Errorf("mongo machinery backend: result of %s: %w", st.TaskUUID, err)
				break
			}
			doc.Results = append(doc.Results, mResultDoc{Type: r.Type, Value: v})
		}
		if bad != nil {
			fail(i, bad)
			continue
		}
		if err := b.setState(ctx, st, &doc); err != nil {
			fail(i, err)
		}
	}
	return errs
}

// setState replaces the task's document with doc (upsert), unless st is
// not PENDING and the task is cancelled (replaceUnlessCancelled).
func (b *MachineryBackend) setState(ctx context.Context, st *driver.TaskState, doc *mTaskDoc) error {
	c, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	kept, err := replaceUnlessCancelled(c, b.tasks, st, machineryCancelMark, func(time.Time) any { return doc })
	if err != nil {
		return fmt.Errorf("mongo machinery backend: set state of %s: %w", st.TaskUUID, err)
	}
	if kept {
		return fmt.Errorf("mongo machinery backend: %s of task %s not written over its CANCELLED state: %w", st.State, st.TaskUUID, driver.ErrCancelled)
	}
	return nil
}

// machineryCancelMark is a live cancel in machinery's format.
var machineryCancelMark = cancelMark{
	not: func(now time.Time) bson.A {
		return bson.A{
			bson.D{{Key: "state", Value: bson.D{{Key: "$ne", Value: string(driver.StateFailure)}}}},
			bson.D{{Key: "error_kind", Value: bson.D{{Key: "$ne", Value: cancelledKind}}}},
			bson.D{{Key: "delete_at", Value: bson.D{{Key: "$lte", Value: now}}}},
		}
	},
	is: func(now time.Time) bson.D {
		return bson.D{{Key: "state", Value: string(driver.StateFailure)},
			{Key: "error_kind", Value: cancelledKind}, {Key: "delete_at", Value: bson.D{{Key: "$gt", Value: now}}}}
	},
}

// A cancel in machinery's format is a FAILURE whose error_kind is
// cancelledKind: errand's CANCELLED (docs/migrating-from-machinery.md),
// as the Redis backend marks it. Its Error is the canceller's, or
// cancelledError.
const (
	cancelledKind  = "cancelled"
	cancelledError = "errand: task cancelled"
)

// Cancel records each task's cancel, one after the other
// (driver.Canceller), as machinery's FAILURE marked cancelled, delete_at
// ResultsExpireIn away, the canceller's Error, ErrorDetail and
// FinishedAt (and Progress when it has one),
// keeping the task's name, attempt, CreatedAt, StartedAt and progress:
// per task one findAndModify filtered on "not SUCCESS or FAILURE (a
// cancel is one), created no later than the cancel's FinishedAt". When
// it matches nothing, a read tells a task without a state or a finished
// one (nothing written) from one created after the canceller's clock,
// cancelled again with a FinishedAt no earlier than its CreatedAt. As for
// the errand format (Backend.Cancel), each cancel is one atomic update of
// one document on MongoDB; on FerretDB v1, within one connection only.
func (b *MachineryBackend) Cancel(ctx context.Context, sts []*driver.TaskState) []driver.CancelResult {
	out := make([]driver.CancelResult, len(sts))
	for i, st := range sts {
		out[i] = b.cancel(ctx, st)
	}
	return out
}

func (b *MachineryBackend) cancel(ctx context.Context, st *driver.TaskState) driver.CancelResult {
	if st == nil {
		return driver.CancelResult{Err: errors.New("mongo machinery backend: cancel of a nil state")}
	}
	c, cancel, err := b.call(ctx)
	if err != nil {
		return driver.CancelResult{Err: err}
	}
	defer cancel()
	fin := st.FinishedAt
	if fin.IsZero() {
		fin = time.Now()
	}
	fail := func(err error) driver.CancelResult {
		return driver.CancelResult{Err: fmt.Errorf("mongo machinery backend: cancel of %s: %w", st.TaskUUID, err)}
	}
	for range cancelTries {
		filter := bson.D{{Key: "_id", Value: st.TaskUUID},
			{Key: "state", Value: bson.D{{Key: "$nin", Value: bson.A{string(driver.StateSuccess), string(driver.StateFailure)}}}},
			{Key: "created_at", Value: bson.D{{Key: "$lte", Value: fin}}},
		}
		errText := st.Error
		if errText == "" {
			errText = cancelledError
		}
		set := bson.D{{Key: "state", Value: string(driver.StateFailure)}, {Key: "error", Value: errText},
			{Key: "error_kind", Value: cancelledKind}, {Key: "error_detail", Value: st.ErrorDetail},
			{Key: "finished_at", Value: fin}, {Key: "delete_at", Value: time.Now().Add(b.opts.ResultsExpireIn).UTC()}}
		if len(st.Progress) > 0 {
			set = append(set, bson.E{Key: "progress", Value: string(st.Progress)})
		}
		var prev mTaskDoc
		err := b.tasks.FindOneAndUpdate(c, filter, bson.D{{Key: "$set", Value: set}},
			options.FindOneAndUpdate().SetReturnDocument(options.Before)).Decode(&prev)
		if err == nil {
			p, err := b.fromDoc(&prev)
			if err != nil {
				return fail(fmt.Errorf("cancelled, but its previous state: %w", err))
			}
			return driver.CancelResult{Prev: p, Written: true}
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return fail(err)
		}
		err = b.tasks.FindOne(c, bson.D{{Key: "_id", Value: st.TaskUUID}}).Decode(&prev)
		if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && expired(&prev)) {
			return driver.CancelResult{}
		}
		if err != nil {
			return fail(err)
		}
		p, err := b.fromDoc(&prev)
		if err != nil {
			return fail(err)
		}
		if p.State.Terminal() {
			return driver.CancelResult{Prev: p}
		}
		fin = latest(fin, p.CreatedAt)
	}
	return fail(fmt.Errorf("its state changed under %d tries", cancelTries))
}

func (b *MachineryBackend) fromDoc(d *mTaskDoc) (*driver.TaskState, error) {
	st := &driver.TaskState{TaskUUID: d.ID, TaskName: d.TaskName, State: driver.State(d.State), Error: d.Error, CreatedAt: d.CreatedAt,
		Attempt: d.Attempt, ErrorKind: d.ErrorKind, ErrorDetail: d.ErrorDetail, StartedAt: d.StartedAt, FinishedAt: d.FinishedAt}
	if st.State == driver.StateFailure && st.ErrorKind == cancelledKind {
		st.State = driver.StateCancelled
	}
	if d.Progress != "" {
		st.Progress = json.RawMessage(d.Progress)
	}
	for _, r := range d.Results {
		raw, err := json.Marshal(plain(r.Value))
		if err != nil {
			return nil, fmt.Errorf("mongo machinery backend: result of %s: %w", d.ID, err)
		}
		st.Results = append(st.Results, driver.Result{Type: r.Type, Value: raw})
	}
	return st, nil
}

// plain turns decoded BSON (bson.D, bson.A) into maps and slices that
// encode as JSON objects and arrays.
func plain(v any) any {
	switch x := v.(type) {
	case bson.D:
		m := make(map[string]any, len(x))
		for _, e := range x {
			m[e.Key] = plain(e.Value)
		}
		return m
	case bson.A:
		out := make([]any, len(x))
		for i := range x {
			out[i] = plain(x[i])
		}
		return out
	}
	return v
}

func expired(d *mTaskDoc) bool { return !d.DeleteAt.IsZero() && time.Now().After(d.DeleteAt) }

// GetState reads a task's document, or driver.ErrTaskNotFound (also past
// its delete_at, on a server without TTL indexes).
func (b *MachineryBackend) GetState(ctx context.Context, taskUUID string) (*driver.TaskState, error) {
	c, cancel, err := b.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var d mTaskDoc
	err = b.tasks.FindOne(c, bson.D{{Key: "_id", Value: taskUUID}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && expired(&d)) {
		return nil, driver.ErrTaskNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("mongo machinery backend: get state of %s: %w", taskUUID, err)
	}
	return b.fromDoc(&d)
}

// InitGroup inserts machinery's group meta.
func (b *MachineryBackend) InitGroup(ctx context.Context, groupUUID string, taskUUIDs []string) error {
	c, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	_, err = b.groups.ReplaceOne(c, bson.D{{Key: "_id", Value: groupUUID}},
		mGroupDoc{ID: groupUUID, TaskUUIDs: taskUUIDs, CreatedAt: time.Now().UTC()}, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("mongo machinery backend: init group %s: %w", groupUUID, err)
	}
	return nil
}

func (b *MachineryBackend) group(ctx context.Context, groupUUID string) (*mGroupDoc, error) {
	c, cancel, err := b.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var g mGroupDoc
	err = b.groups.FindOne(c, bson.D{{Key: "_id", Value: groupUUID}}).Decode(&g)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("group %s: %w", groupUUID, driver.ErrGroupNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mongo machinery backend: read group %s: %w", groupUUID, err)
	}
	return &g, nil
}

// CompleteGroupMember adds taskUUID to errand's errand_done list in the
// group's document (one update, $addToSet, only where it is a member) and
// counts the members done: in that list (completed by errand workers) or
// recorded SUCCESS or FAILURE (by machinery workers, which keep no
// count), in one count on the server. A redelivered member counts once.
func (b *MachineryBackend) CompleteGroupMember(ctx context.Context, groupUUID, taskUUID string) (int, int, error) {
	c, cancel, err := b.call(ctx)
	if err != nil {
		return 0, 0, err
	}
	var g mGroupDoc
	err = b.groups.FindOneAndUpdate(c,
		bson.D{{Key: "_id", Value: groupUUID}, {Key: "task_uuids", Value: taskUUID}},
		bson.D{{Key: "$addToSet", Value: bson.D{{Key: "errand_done", Value: taskUUID}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After),
	).Decode(&g)
	cancel()
	if errors.Is(err, mongo.ErrNoDocuments) {
		if _, gerr := b.group(ctx, groupUUID); gerr != nil {
			return 0, 0, gerr
		}
		return 0, 0, fmt.Errorf("task %s, group %s: %w", taskUUID, groupUUID, driver.ErrNotMember)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("mongo machinery backend: complete member %s of group %s: %w", taskUUID, groupUUID, err)
	}
	done := make(map[string]bool, len(g.Done))
	for _, id := range g.Done {
		done[id] = true
	}
	others := make([]string, 0, len(g.TaskUUIDs))
	n := 0
	for _, id := range g.TaskUUIDs {
		if done[id] {
			n++
		} else {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return n, len(g.TaskUUIDs), nil
	}
	c, cancel, err = b.call(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer cancel()
	m, err := b.tasks.CountDocuments(c, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: others}}},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{string(driver.StateSuccess), string(driver.StateFailure)}}}},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("mongo machinery backend: count group %s: %w", groupUUID, err)
	}
	return n + int(m), len(g.TaskUUIDs), nil
}

// ClaimChord sets chord_triggered where it is false, with the claimer, in
// one findAndModify; the claimer that won wins again.
func (b *MachineryBackend) ClaimChord(ctx context.Context, groupUUID, claimer string) (bool, error) {
	c, cancel, err := b.call(ctx)
	if err != nil {
		return false, err
	}
	var g mGroupDoc
	err = b.groups.FindOneAndUpdate(c,
		bson.D{{Key: "_id", Value: groupUUID}, {Key: "chord_triggered", Value: false}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "chord_triggered", Value: true}, {Key: "errand_chord_claimer", Value: claimer}}}},
	).Decode(&g)
	cancel()
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return false, fmt.Errorf("mongo machinery backend: claim chord of group %s: %w", groupUUID, err)
	}
	cur, err := b.group(ctx, groupUUID)
	if err != nil {
		return false, err
	}
	return cur.Claimer == claimer, nil
}

// GroupStates reads the members' documents in one query, in group order;
// a member with none is PENDING.
func (b *MachineryBackend) GroupStates(ctx context.Context, groupUUID string) ([]*driver.TaskState, error) {
	g, err := b.group(ctx, groupUUID)
	if err != nil {
		return nil, err
	}
	c, cancel, err := b.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	cur, err := b.tasks.Find(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: g.TaskUUIDs}}}})
	if err != nil {
		return nil, fmt.Errorf("mongo machinery backend: read states of group %s: %w", groupUUID, err)
	}
	var docs []mTaskDoc
	if err := cur.All(c, &docs); err != nil {
		return nil, fmt.Errorf("mongo machinery backend: read states of group %s: %w", groupUUID, err)
	}
	byID := make(map[string]*mTaskDoc, len(docs))
	for i := range docs {
		if !expired(&docs[i]) {
			byID[docs[i].ID] = &docs[i]
		}
	}
	out := make([]*driver.TaskState, len(g.TaskUUIDs))
	for i, id := range g.TaskUUIDs {
		if d, ok := byID[id]; ok {
			if st, err := b.fromDoc(d); err == nil {
				out[i] = st
				continue
			}
		}
		out[i] = &driver.TaskState{TaskUUID: id, State: driver.StatePending}
	}
	return out, nil
}

// Close disconnects the client if CloseClient is set. A second Close is
// harmless.
func (b *MachineryBackend) Close() error {
	if b.closed.Swap(true) || !b.opts.CloseClient {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), disconnectWait)
	defer cancel()
	return b.client.Disconnect(ctx)
}

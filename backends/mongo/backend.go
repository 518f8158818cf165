package mongobackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand/driver"
)

// Options configures a Backend.
type Options struct {
	// Database holds the collections. Default: "errand".
	Database string
	// Prefix starts the collection names (PREFIX_tasks, PREFIX_groups).
	// Default: "errand".
	Prefix string
	// ResultExpiry is how long a state is kept after its last write.
	// Default: 1h.
	ResultExpiry time.Duration
	// GroupExpiry is how long group metadata is kept after the group's last
	// completion. Default: 24h; never less than ResultExpiry.
	GroupExpiry time.Duration
	// CloseClient: Close also disconnects the client (set by Open).
	CloseClient bool
	// CallTimeout bounds each backend call (every server round trip it
	// makes, the driver's retries included), so a call whose ctx has no
	// deadline still returns when the server accepts connections but never
	// answers. A ctx deadline that comes sooner wins. An injected client's
	// own Timeout (timeoutMS) applies as well. Default: 10s.
	CallTimeout time.Duration
}

// Backend is a driver.Backend on MongoDB. It is safe for concurrent use.
type Backend struct {
	client        *mongo.Client
	opts          Options
	tasks, groups *mongo.Collection
	closed        atomic.Bool
}

var (
	_ driver.Backend   = (*Backend)(nil)
	_ driver.Expirer   = (*Backend)(nil)
	_ driver.Canceller = (*Backend)(nil)
)

// New returns a backend on client. It creates the TTL indexes where the
// server supports them and carries on without them where it does not (expiry
// is also checked on every read). opts may be nil.
func New(ctx context.Context, client *mongo.Client, opts *Options) (*Backend, error) {
	b := &Backend{client: client}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.Database == "" {
		b.opts.Database = "errand"
	}
	if b.opts.Prefix == "" {
		b.opts.Prefix = "errand"
	}
	if b.opts.CallTimeout <= 0 {
		b.opts.CallTimeout = 10 * time.Second
	}
	b.opts.ResultExpiry, b.opts.GroupExpiry = driver.ExpiryDefaults(b.opts.ResultExpiry, b.opts.GroupExpiry)
	db := client.Database(b.opts.Database)
	b.tasks = db.Collection(b.opts.Prefix + "_tasks")
	b.groups = db.Collection(b.opts.Prefix + "_groups")
	ttl := mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(0)}
	for _, c := range []*mongo.Collection{b.tasks, b.groups} {
		cctx, cancel := b.bound(ctx)
		_, err := c.Indexes().CreateOne(cctx, ttl)
		cancel()
		if err != nil && !unsupported(err) {
			return nil, fmt.Errorf("mongo backend: create TTL index on %s: %w", c.Name(), err)
		}
	}
	return b, nil
}

// unsupported reports a server refusing a TTL index (FerretDB v1).
func unsupported(err error) bool {
	var ce mongo.CommandError
	if errors.As(err, &ce) && (ce.Code == 115 || ce.Code == 238 || ce.Code == 2) { // CommandNotSupported, NotImplemented, BadValue
		return true
	}
	return strings.Contains(strings.ToLower(err.Error()), "not implemented") || strings.Contains(strings.ToLower(err.Error()), "not supported")
}

func init() {
	driver.RegisterBackend("mongodb", Open)
	driver.RegisterBackend("mongodb+srv", Open)
}

// Open connects to a mongodb:// URL (see the package doc) and checks the
// server with a ping, all within ctx and the per-call timeout (the URL's
// timeout parameter, default 10s): a wrong, unreachable or silent server is
// an error by then. The clean-up after a failed ping waits at most
// disconnectWait.
func Open(ctx context.Context, u *url.URL) (driver.Backend, error) {
	q := u.Query()
	opts := &Options{CloseClient: true, Prefix: q.Get("prefix"), Database: strings.TrimPrefix(u.Path, "/")}
	if err := driver.DurationParams(q, map[string]*time.Duration{"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry, "timeout": &opts.CallTimeout}); err != nil {
		return nil, fmt.Errorf("mongo backend: %w", err)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 10 * time.Second
	}
	format := q.Get("format")
	if format != "" && format != "machinery" {
		return nil, fmt.Errorf("mongo backend: format %q is not known (only format=machinery)", format)
	}
	for _, k := range []string{"result_expiry", "group_expiry", "prefix", "timeout", "format"} {
		q.Del(k)
	}
	clean := *u
	clean.RawQuery = q.Encode()
	co := options.Client().ApplyURI(clean.String())
	if co.Timeout == nil {
		co.SetTimeout(opts.CallTimeout) // timeoutMS, unless the URL sets it
	}
	client, err := mongo.Connect(co)
	if err != nil {
		return nil, fmt.Errorf("mongo backend: connect %s: %s", u.Redacted(), redact(err, u))
	}
	fail := func(err error) error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), disconnectWait)
		defer cancel()
		client.Disconnect(dctx)
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		return nil, fail(fmt.Errorf("mongo backend: ping %s (within the caller's ctx and a per-call timeout of %v): %s", u.Redacted(), opts.CallTimeout, redact(err, u)))
	}
	if format == "machinery" {
		return NewMachinery(client, &MachineryOptions{Database: opts.Database, ResultsExpireIn: opts.ResultExpiry, CallTimeout: opts.CallTimeout, CloseClient: true}), nil
	}
	b, err := New(pctx, client, opts)
	if err != nil {
		return nil, fail(err)
	}
	return b, nil
}

// disconnectWait bounds the disconnect after a failed Open: a silent server
// must not hold Open past its caller's ctx.
const disconnectWait = 500 * time.Millisecond

func redact(err error, u *url.URL) string {
	msg := err.Error()
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

func (b *Backend) check() error {
	if b.closed.Load() {
		return fmt.Errorf("mongo backend: %w", driver.ErrClosed)
	}
	return nil
}

// bound returns ctx bounded by Options.CallTimeout, for one backend call.
func (b *Backend) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

// err maps err onto errand's errors: the caller's own ctx error when its
// ctx ended, driver.ErrClosed after Close, and otherwise the server's error
// (a call cut short by Options.CallTimeout says so).
func (b *Backend) err(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrClientDisconnected) || b.closed.Load():
		return fmt.Errorf("mongo backend: %w", driver.ErrClosed)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("mongo backend: no answer within the per-call timeout of %v (Options.CallTimeout): %w", b.opts.CallTimeout, err)
	}
	return fmt.Errorf("mongo backend: %w", err)
}

// taskDoc is a task's document. Results keep their JSON as a string, so no
// array holds another array.
type taskDoc struct {
	ID         string      `bson:"_id"`
	Name       string      `bson:"name"`
	State      string      `bson:"state"`
	Attempt    int         `bson:"attempt"`
	Results    []resultDoc `bson:"results"`
	Error      string      `bson:"error"`
	ErrorKind  string      `bson:"error_kind,omitempty"`
	ErrDetail  string      `bson:"error_detail,omitempty"`
	CreatedAt  time.Time   `bson:"created_at"`
	StartedAt  time.Time   `bson:"started_at"`
	FinishedAt time.Time   `bson:"finished_at"`
	// Progress is the state's Progress, its JSON as a string (byte for
	// byte); absent when none.
	Progress  string    `bson:"progress,omitempty"`
	ExpiresAt time.Time `bson:"expires_at"`
}

type resultDoc struct {
	Type  string `bson:"type"`
	Value string `bson:"value"`
}

func toDoc(st *driver.TaskState, expires time.Time) taskDoc {
	d := taskDoc{ID: st.TaskUUID, Name: st.TaskName, State: string(st.State), Attempt: st.Attempt, Error: st.Error,
		ErrorKind: st.ErrorKind, ErrDetail: st.ErrorDetail, CreatedAt: st.CreatedAt, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		Progress: string(st.Progress), ExpiresAt: expires}
	for _, r := range st.Results {
		d.Results = append(d.Results, resultDoc{Type: r.Type, Value: string(r.Value)})
	}
	return d
}

func (d taskDoc) state() *driver.TaskState {
	st := &driver.TaskState{TaskUUID: d.ID, TaskName: d.Name, State: driver.State(d.State), Attempt: d.Attempt, Error: d.Error,
		ErrorKind: d.ErrorKind, ErrorDetail: d.ErrDetail, CreatedAt: d.CreatedAt.UTC(), StartedAt: d.StartedAt.UTC(), FinishedAt: d.FinishedAt.UTC()}
	if d.StartedAt.IsZero() {
		st.StartedAt = time.Time{}
	}
	if d.FinishedAt.IsZero() {
		st.FinishedAt = time.Time{}
	}
	if d.Progress != "" {
		st.Progress = json.RawMessage(d.Progress)
	}
	for _, r := range d.Results {
		st.Results = append(st.Results, driver.Result{Type: r.Type, Value: json.RawMessage(r.Value)})
	}
	return st
}

func live(now time.Time) bson.E {
	return bson.E{Key: "expires_at", Value: bson.D{{Key: "$gt", Value: now}}}
}

// SetStates replaces each state's task document (upsert), one state after
// the other, in order; a state whose write fails fails alone. A state
// other than PENDING is not written over a live CANCELLED (its filter
// leaves that document out, see Cancel): it fails alone with an error
// wrapping driver.ErrCancelled.
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	if err := b.check(); err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	return driver.EachItem(len(sts), func(i int) error { return b.setState(ctx, sts[i]) })
}

// setState replaces the task's document (upsert), unless the state is
// not PENDING and the task is CANCELLED (replaceUnlessCancelled).
func (b *Backend) setState(ctx context.Context, st *driver.TaskState) error {
	cctx, cancel := b.bound(ctx)
	defer cancel()
	kept, err := replaceUnlessCancelled(cctx, b.tasks, st, errandCancelMark,
		func(now time.Time) any { return toDoc(st, now.Add(b.opts.ResultExpiry)) })
	if err != nil {
		return b.err(ctx, err)
	}
	if kept {
		return fmt.Errorf("mongo backend: %s of task %s not written over its CANCELLED state: %w", st.State, st.TaskUUID, driver.ErrCancelled)
	}
	return nil
}

// errandCancelMark is a live CANCELLED in errand's format.
var errandCancelMark = cancelMark{
	not: func(now time.Time) bson.A {
		return bson.A{
			bson.D{{Key: "state", Value: bson.D{{Key: "$ne", Value: string(driver.StateCancelled)}}}},
			bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lte", Value: now}}}},
		}
	},
	is: func(now time.Time) bson.D {
		return bson.D{live(now), {Key: "state", Value: string(driver.StateCancelled)}}
	},
}

// GetState reads a live task document.
func (b *Backend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	var d taskDoc
	err := b.tasks.FindOne(cctx, bson.D{{Key: "_id", Value: id}, live(time.Now())}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mongo backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	if err != nil {
		return nil, b.err(ctx, err)
	}
	return d.state(), nil
}

type groupDoc struct {
	ID      string   `bson:"_id"`
	Members []string `bson:"members"`
	Count   int      `bson:"count"`
	Total   int      `bson:"total"`
}

// InitGroup writes the group's document.
func (b *Backend) InitGroup(ctx context.Context, g string, ids []string) error {
	if err := b.check(); err != nil {
		return err
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	doc := bson.D{{Key: "_id", Value: g}, {Key: "members", Value: ids}, {Key: "done", Value: bson.A{}},
		{Key: "count", Value: 0}, {Key: "total", Value: len(ids)}, {Key: "expires_at", Value: time.Now().Add(b.opts.GroupExpiry)}}
	_, err := b.groups.ReplaceOne(cctx, bson.D{{Key: "_id", Value: g}}, doc, options.Replace().SetUpsert(true))
	return b.err(ctx, err)
}

var countOnly = bson.D{{Key: "count", Value: 1}, {Key: "total", Value: 1}}

// CompleteGroupMember adds the member to done and increments the counter in
// one update whose filter matches only if the UUID is in the group's member
// list and not done yet (so a redelivered member changes nothing, and a UUID
// that is not a member never counts), then reads the counter where the UUID
// is a member. Only when that read finds nothing does it tell a missing
// group (driver.ErrGroupNotFound) from a UUID that is not a member
// (driver.ErrNotMember) with a second read.
func (b *Backend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	if err := b.check(); err != nil {
		return 0, 0, err
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	now := time.Now()
	member := bson.E{Key: "members", Value: id} // an array field holding id
	filter := bson.D{{Key: "_id", Value: g}, live(now), member, {Key: "done", Value: bson.D{{Key: "$ne", Value: id}}}}
	update := bson.D{
		{Key: "$addToSet", Value: bson.D{{Key: "done", Value: id}}},
		{Key: "$inc", Value: bson.D{{Key: "count", Value: 1}}},
		{Key: "$set", Value: bson.D{{Key: "expires_at", Value: now.Add(b.opts.GroupExpiry)}}},
	}
	if _, err := b.groups.UpdateOne(cctx, filter, update); err != nil {
		return 0, 0, b.err(ctx, err)
	}
	// Read the counter (two fields, O(1)). Two racing last members may both
	// read done == total; the chord claim lets only one through.
	var d groupDoc
	err := b.groups.FindOne(cctx, bson.D{{Key: "_id", Value: g}, live(now), member}, options.FindOne().SetProjection(countOnly)).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		n, err := b.groups.CountDocuments(cctx, bson.D{{Key: "_id", Value: g}, live(now)})
		if err != nil {
			return 0, 0, b.err(ctx, err)
		}
		if n == 0 {
			return 0, 0, fmt.Errorf("mongo backend: group %s: %w", g, driver.ErrGroupNotFound)
		}
		return 0, 0, fmt.Errorf("mongo backend: task %s, group %s: %w", id, g, driver.ErrNotMember)
	}
	if err != nil {
		return 0, 0, b.err(ctx, err)
	}
	return d.Count, d.Total, nil
}

// ClaimChord sets the claimer where none is set or it is already this
// claimer; it won if the update matched.
func (b *Backend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	if err := b.check(); err != nil {
		return false, err
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	now := time.Now()
	filter := bson.D{{Key: "_id", Value: g}, live(now), {Key: "$or", Value: bson.A{
		bson.D{{Key: "claimer", Value: nil}},
		bson.D{{Key: "claimer", Value: claimer}},
	}}}
	res, err := b.groups.UpdateOne(cctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "claimer", Value: claimer}}}})
	if err != nil {
		return false, b.err(ctx, err)
	}
	if res.MatchedCount == 1 {
		return true, nil
	}
	n, err := b.groups.CountDocuments(cctx, bson.D{{Key: "_id", Value: g}, live(now)})
	if err != nil {
		return false, b.err(ctx, err)
	}
	if n == 0 {
		return false, fmt.Errorf("mongo backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	return false, nil
}

// GroupStates reads the group, then every member's state in one query.
func (b *Backend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	now := time.Now()
	var gd groupDoc
	err := b.groups.FindOne(cctx, bson.D{{Key: "_id", Value: g}, live(now)}, options.FindOne().SetProjection(bson.D{{Key: "members", Value: 1}})).Decode(&gd)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mongo backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	if err != nil {
		return nil, b.err(ctx, err)
	}
	cur, err := b.tasks.Find(cctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: gd.Members}}}, live(now)})
	if err != nil {
		return nil, b.err(ctx, err)
	}
	var docs []taskDoc
	if err := cur.All(cctx, &docs); err != nil {
		return nil, b.err(ctx, err)
	}
	byID := make(map[string]*driver.TaskState, len(docs))
	for _, d := range docs {
		byID[d.ID] = d.state()
	}
	out := make([]*driver.TaskState, len(gd.Members))
	for i, id := range gd.Members {
		if st, ok := byID[id]; ok {
			out[i] = st
		} else {
			out[i] = &driver.TaskState{TaskUUID: id, State: driver.StatePending}
		}
	}
	return out, nil
}

// Close makes later calls return driver.ErrClosed; it disconnects the client
// only if Options.CloseClient.
func (b *Backend) Close() error {
	if b.closed.Swap(true) || !b.opts.CloseClient {
		return nil
	}
	return b.client.Disconnect(context.Background())
}

package postgresbroker_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// statesBackend stands in for errand's PostgreSQL result backend, whose
// module this one cannot import: it declares its location as that backend
// does (driver.Located: a *pgdb.Location of its pool, schema and expiry)
// and keeps its task states in that layout, through internal/pgdb's
// statements (set_states, start_states, GetStateSQL), so the broker's
// co-located writes are read back as the backend reads them. Groups come
// from a memory backend.
type statesBackend struct {
	driver.Backend
	loc *pgdb.Location
}

func newStatesBackend(t testing.TB, pool *pgxpool.Pool, schema string, expiry time.Duration) *statesBackend {
	mem := memorybackend.New(nil)
	t.Cleanup(func() { mem.Close() })
	if expiry <= 0 {
		expiry = time.Hour
	}
	return &statesBackend{Backend: mem, loc: &pgdb.Location{Pool: pool, Schema: schema, Expiry: expiry}}
}

func (s *statesBackend) Location() any { return s.loc }

func (s *statesBackend) write(ctx context.Context, sts []*driver.TaskState, ifAbsent bool) []error {
	var a pgdb.StateArgs
	for _, st := range sts {
		if err := a.Append(st); err != nil {
			return driver.BatchErrors(len(sts), err)
		}
	}
	_, refused, err := s.loc.WriteStates(ctx, pgdb.WriterFor(ctx, s.loc.Pool), &a, ifAbsent)
	if err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	return pgdb.Refused("states backend", nil, sts, refused)
}

func (s *statesBackend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	return s.write(ctx, sts, false)
}

func (s *statesBackend) SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error {
	return s.write(ctx, sts, true)
}

func (s *statesBackend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	var (
		body                       string
		created, started, finished *time.Time
		progress                   *string
	)
	err := s.loc.Pool.QueryRow(ctx, pgdb.GetStateSQL(s.loc.Schema), id).Scan(&body, &created, &started, &finished, &progress)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, driver.ErrTaskNotFound
	}
	if err != nil {
		return nil, err
	}
	return pgdb.DecodeState(id, body, created, started, finished, progress)
}

// GroupStates reads the states of the group's members, whose IDs the
// memory backend keeps.
func (s *statesBackend) GroupStates(ctx context.Context, group string) ([]*driver.TaskState, error) {
	members, err := s.Backend.GroupStates(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make([]*driver.TaskState, len(members))
	for i, m := range members {
		st, err := s.GetState(ctx, m.TaskUUID)
		switch {
		case errors.Is(err, driver.ErrTaskNotFound):
			st = &driver.TaskState{TaskUUID: m.TaskUUID, State: driver.StatePending}
		case err != nil:
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}

func (s *statesBackend) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	var a pgdb.StateArgs
	firsts := make([]bool, len(reqs))
	for i, r := range reqs {
		if err := a.Append(r.Started); err != nil {
			return driver.StartFailed(len(reqs), err)
		}
		firsts[i] = r.FirstDelivery
	}
	rows, err := s.loc.Pool.Query(ctx, pgdb.StartStatesSQL(s.loc.Schema), pgdb.StartArgs(&a, firsts, s.loc.Expiry)...)
	if err != nil {
		return driver.StartFailed(len(reqs), err)
	}
	defer rows.Close()
	out := make([]driver.StartResult, len(reqs))
	for rows.Next() {
		var (
			ord                        int32
			written                    bool
			body, progress             *string
			created, started, finished *time.Time
		)
		if err := rows.Scan(&ord, &written, &body, &created, &started, &finished, &progress); err != nil {
			return driver.StartFailed(len(reqs), err)
		}
		r := &out[ord-1]
		r.Written = written
		if body != nil {
			r.Prev, r.Err = pgdb.DecodeState(reqs[ord-1].Started.TaskUUID, *body, created, started, finished, progress)
		}
	}
	if err := rows.Err(); err != nil {
		return driver.StartFailed(len(reqs), err)
	}
	return out
}

var (
	_ driver.Located       = (*statesBackend)(nil)
	_ driver.Starter       = (*statesBackend)(nil)
	_ driver.PendingWriter = (*statesBackend)(nil)
)

// hiddenLocation is a statesBackend without its driver.Located: the
// portable path over the same states.
type hiddenLocation struct {
	driver.Backend
	s *statesBackend
}

func (h hiddenLocation) SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error {
	return h.s.SetPendingIfAbsent(ctx, sts)
}

func (h hiddenLocation) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	return h.s.Start(ctx, reqs)
}

// The Worker/Colocation cases of the kit, on the broker co-located with
// the stand-in backend in the harness's schema.
func TestColocationKit(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	bh := harnessIn(pool, schema)
	beh := conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			return newStatesBackend(t, pool, schema, expiry)
		},
		Caps: conformance.BackendCaps{Start: true, PendingIfAbsent: true, Located: true},
	}
	b := bh.New(t)
	if b.(driver.Colocator).Colocate(beh.New(t, 0)) == nil {
		t.Fatalf("Colocate answered nil for a backend in the broker's own pool and schema; want its one-trip calls")
	}
	conformance.RunWorker(t, bh, beh)
}

// Colocate answers calls only for a *pgdb.Location that is Same as the
// broker's pool and schema: another pool on the same database and user
// too, never another schema, database or user, a backend that declares
// no location, or a location of another type.
func TestColocateLocation(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lazy := func(edit func(*pgxpool.Config)) *pgxpool.Pool { // a pool that never connects here
		cfg := pool.Config()
		edit(cfg)
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	other := lazy(func(*pgxpool.Config) {})
	mem := memorybackend.New(nil)
	defer mem.Close()
	located := func(l any) driver.Backend { return locatedAs{mem, l} }
	for _, c := range []struct {
		what string
		be   driver.Backend
		want bool
	}{
		{"the broker's pool and schema", newStatesBackend(t, pool, schema, 0), true},
		{"another pool on the same database and user", newStatesBackend(t, other, schema, 0), true},
		{"another schema", newStatesBackend(t, pool, schema+"_other", 0), false},
		{"another database", newStatesBackend(t, lazy(func(c *pgxpool.Config) { c.ConnConfig.Database += "_other" }), schema, 0), false},
		{"another user", newStatesBackend(t, lazy(func(c *pgxpool.Config) { c.ConnConfig.User += "_other" }), schema, 0), false},
		{"another port", newStatesBackend(t, lazy(func(c *pgxpool.Config) { c.ConnConfig.Port++ }), schema, 0), false},
		{"no location (the states hidden)", hiddenLocation{mem, newStatesBackend(t, pool, schema, 0)}, false},
		{"a nil *pgdb.Location", located((*pgdb.Location)(nil)), false},
		{"a pgdb.Location value, not a pointer", located(pgdb.Location{Pool: pool, Schema: schema}), false},
		{"a location of another type", located("postgres://same"), false},
		{"a memory backend", mem, false},
	} {
		if got := b.Colocate(c.be) != nil; got != c.want {
			t.Errorf("Colocate(a backend with %s) answered calls: %v; want %v (driver.Colocator: only where one statement reaches the backend's states)", c.what, got, c.want)
		}
	}
}

type locatedAs struct {
	driver.Backend
	l any
}

func (l locatedAs) Location() any { return l.l }

// statementCounter counts the statements run on a pool's connections
// under a ctx of count's: the call's own, not the listener's or the
// notifier's.
type statementCounter struct{}

type countKey struct{}

func (statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if n, ok := ctx.Value(countKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
	return ctx
}

func (statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedPool is a pool on pool's database whose statements count counts.
func countedPool(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = statementCounter{}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// colocated returns a broker on a counted pool and its calls for a
// stand-in backend of schema.
func colocated(t *testing.T, pool *pgxpool.Pool, schema string) (*postgresbroker.Broker, driver.Colocation, *statesBackend) {
	t.Helper()
	counted := countedPool(t, pool)
	b, err := postgresbroker.New(context.Background(), counted, &postgresbroker.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	be := newStatesBackend(t, pool, schema, time.Hour)
	c := b.Colocate(be)
	if c == nil {
		t.Fatal("Colocate answered nil for the broker's own schema")
	}
	return b, c, be
}

// count returns how many statements f ran with the ctx it is given, on a
// pool of countedPool's.
func count(ctx context.Context, f func(ctx context.Context)) int64 {
	var n atomic.Int64
	f(context.WithValue(ctx, countKey{}, &n))
	return n.Load()
}

func stateOf(t *testing.T, be *statesBackend, id string) *driver.TaskState {
	t.Helper()
	st, err := be.GetState(context.Background(), id)
	if errors.Is(err, driver.ErrTaskNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("read the state of %s: %v", id, err)
	}
	return st
}

// rows counts the rows of table in schema matching where (with args).
func rows(t *testing.T, pool *pgxpool.Pool, schema, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgdb.Table(schema, table)+" WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Colocation.Send is one statement writing the messages and the PENDING
// states where a task has none (a task with a state keeps it); inside a
// caller's transaction (a pgx.Tx, a *sql.Tx of pgx's stdlib driver) both
// exist only once it commits, and a rolled back one leaves neither.
func TestColocationSend(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	_, c, be := colocated(t, pool, schema)
	now := time.Now().UTC().Truncate(time.Microsecond)
	pending := func(id string) *driver.TaskState {
		return &driver.TaskState{TaskUUID: id, TaskName: "t", State: driver.StatePending, CreatedAt: now}
	}
	msg := func(id string) driver.Message {
		return driver.Message{Queue: "q", ID: id, Body: []byte("{}"), Task: "t", TaskAttempt: 1}
	}
	if errs := be.SetStates(ctx, []*driver.TaskState{{TaskUUID: "started", TaskName: "t", State: driver.StateStarted, Attempt: 1, CreatedAt: now}}); errs != nil {
		t.Fatal(errs)
	}
	var published bool
	var err error
	if k := count(ctx, func(ctx context.Context) {
		published, err = c.Send(ctx, []*driver.TaskState{pending("a"), pending("started")}, []driver.Message{msg("a"), msg("started")})
	}); k != 1 {
		t.Errorf("a co-located Send ran %d statements; want 1 (driver.Colocation: one step)", k)
	}
	if !published || err != nil {
		t.Fatalf("Send = %v, %v; want published", published, err)
	}
	if got := rows(t, pool, schema, "messages", "queue = 'q'"); got != 2 {
		t.Errorf("Send left %d messages; want 2", got)
	}
	if st := stateOf(t, be, "a"); st == nil || st.State != driver.StatePending || !st.CreatedAt.Equal(now) {
		t.Errorf("Send left task a in %+v; want PENDING created at %v", st, now)
	}
	if st := stateOf(t, be, "started"); st == nil || st.State != driver.StateStarted {
		t.Errorf("Send left a STARTED task in %+v; want STARTED kept (PENDING only where a task has no state)", st)
	}

	db, err := sql.Open("pgx", pgdbtest.URL(t))
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	type txn struct {
		tx               any
		commit, rollback func() error
	}
	begins := map[string]func() txn{
		"pgx.Tx": func() txn {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return txn{tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }}
		},
		"*sql.Tx": func() txn {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return txn{tx, tx.Commit, tx.Rollback}
		},
	}
	for kind, begin := range begins {
		for _, commit := range []bool{false, true} {
			id := kind + " rolled back"
			if commit {
				id = kind + " committed"
			}
			tx := begin()
			if published, err := c.Send(errand.WithTx(ctx, tx.tx), []*driver.TaskState{pending(id)}, []driver.Message{msg(id)}); !published || err != nil {
				t.Fatalf("Send in a %s = %v, %v", kind, published, err)
			}
			if got := rows(t, pool, schema, "messages", "msg_id = $1", id); got != 0 || stateOf(t, be, id) != nil {
				t.Errorf("a Send in an open %s is seen outside it (%d messages); want nothing until it commits", kind, got)
			}
			var err error
			if commit {
				err = tx.commit()
			} else {
				err = tx.rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if commit {
				want = 1
			}
			st := stateOf(t, be, id)
			if got := rows(t, pool, schema, "messages", "msg_id = $1", id); got != want || (st != nil) != commit || (st != nil && st.State != driver.StatePending) {
				t.Errorf("after the %s (committed: %v): %d messages, state %+v; want %d and PENDING exactly when committed", kind, commit, got, st, want)
			}
		}
	}

	// A message Publish refuses publishes nothing and writes no state.
	big := msg("big")
	big.Queue = strings.Repeat("q", 8000)
	if published, err := c.Send(ctx, []*driver.TaskState{pending("big")}, []driver.Message{big}); published || err == nil {
		t.Errorf("Send of a message with a queue name too long = %v, %v; want not published, an error", published, err)
	}
	if stateOf(t, be, "big") != nil {
		t.Errorf("a refused Send wrote a state")
	}
}

// Colocation.FetchStart is one statement leasing messages and beginning
// the attempts of those of the tasks given, by driver.Starter's table
// (every conformance.StartCases row, through the fetch), at the time it
// answers; another task's message and one without a task attempt are
// delivered unstarted, their states untouched.
func TestColocationFetchStart(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b, c, be := colocated(t, pool, schema)
	created := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	cases := conformance.StartCases()
	byID := map[string]conformance.StartCase{}
	for i, sc := range cases {
		id := "case" + string(rune('A'+i%26)) + strings.Repeat("x", i/26) + "-" + sc.Name
		byID[id] = sc
		if sc.Prev != nil {
			prev := *sc.Prev
			prev.TaskUUID, prev.CreatedAt = id, created
			if errs := be.SetStates(ctx, []*driver.TaskState{&prev}); errs != nil {
				t.Fatal(errs)
			}
		}
		m := driver.Message{Queue: "q", ID: id, Body: []byte("{}"), Task: sc.Task, TaskAttempt: sc.Attempt}
		if err := b.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
		if !sc.FirstDelivery { // a redelivery: delivered once before
			if _, err := pool.Exec(ctx, "UPDATE "+pgdb.Table(schema, "messages")+" SET deliveries = 1 WHERE msg_id = $1", id); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range []driver.Message{
		{Queue: "q", ID: "other-task", Body: []byte("{}"), Task: "not.listed", TaskAttempt: 1},
		{Queue: "q", ID: "no-attempt", Body: []byte("{}"), Task: conformance.StartCaseTask},
	} {
		if err := b.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	total := len(cases) + 2
	var (
		ds     []*driver.Delivery
		starts []*driver.StartResult
		at     time.Time
		err    error
	)
	if k := count(ctx, func(ctx context.Context) {
		ds, starts, at, err = c.FetchStart(ctx, "q", total, time.Minute, []string{conformance.StartCaseTask})
	}); k != 1 {
		t.Errorf("a co-located FetchStart ran %d statements; want 1 (driver.Colocation: one step)", k)
	}
	if err != nil || len(ds) != total || len(starts) != total {
		t.Fatalf("FetchStart = %d deliveries, %d starts, %v; want %d each", len(ds), len(starts), err, total)
	}
	if at.IsZero() || time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Errorf("FetchStart answered at %v; want the server's time of the step", at)
	}
	for i, d := range ds {
		res := starts[i]
		if d.ID == "other-task" || d.ID == "no-attempt" {
			if res != nil || stateOf(t, be, d.ID) != nil {
				t.Errorf("FetchStart of %s answered %+v and wrote %+v; want no start, no state", d.ID, res, stateOf(t, be, d.ID))
			}
			continue
		}
		sc := byID[d.ID]
		want := sc.Want()
		st := stateOf(t, be, d.ID)
		switch {
		case res == nil || res.Err != nil:
			t.Errorf("%s: start %+v; want an answer", sc.Name, res)
		case res.Written != want:
			t.Errorf("%s: written %v; want %v (driver.StartRequest.Allows)", sc.Name, res.Written, want)
		case (res.Prev == nil) != (sc.Prev == nil) || (res.Prev != nil && (res.Prev.State != sc.Prev.State || res.Prev.TaskName != sc.Prev.TaskName || res.Prev.Error != sc.Prev.Error)):
			t.Errorf("%s: previous state %+v; want %+v", sc.Name, res.Prev, sc.Prev)
		case want && (st == nil || st.State != driver.StateStarted || st.TaskName != sc.Task || st.Attempt != sc.Attempt || st.TaskUUID != d.ID):
			t.Errorf("%s: state %+v after a written start; want STARTED of %s attempt %d", sc.Name, st, sc.Task, sc.Attempt)
		case want && sc.Prev == nil && (!st.CreatedAt.Equal(at) || !st.StartedAt.Equal(at)):
			t.Errorf("%s: STARTED created %v started %v; want both the step's time %v", sc.Name, st.CreatedAt, st.StartedAt, at)
		case want && sc.Prev != nil && (!st.CreatedAt.Equal(created) || !st.StartedAt.Equal(at)):
			t.Errorf("%s: STARTED created %v started %v; want created %v (the previous state's), started %v", sc.Name, st.CreatedAt, st.StartedAt, created, at)
		case !want && (st == nil) != (sc.Prev == nil):
			t.Errorf("%s: state %+v after a refused start; want it untouched", sc.Name, st)
		case !want && st != nil && (st.State != sc.Prev.State || st.Attempt != sc.Prev.Attempt):
			t.Errorf("%s: state %+v after a refused start; want it untouched (%+v)", sc.Name, st, sc.Prev)
		}
	}
	if got := rows(t, pool, schema, "messages", "queue = 'q' AND leased AND due > now()"); got != total {
		t.Errorf("FetchStart left %d messages in flight; want %d", got, total)
	}
}

// Colocation.Settle is one statement writing every final state and acking
// every delivery still leased under its token; a lost lease answers
// ErrLeaseLost with its state written and the other consumer's delivery
// untouched; acked messages are listed as completed, as Ack's are.
func TestColocationSettle(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b, c, be := colocated(t, pool, schema)
	for _, id := range []string{"ok", "lost"} {
		if err := b.Publish(ctx, driver.Message{Queue: "q", ID: id, Body: []byte("{}"), Task: "t", TaskAttempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.Fetch(ctx, "q", 2, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Fetch: %v, %v", ds, err)
	}
	lost := ds[1]
	if lost.ID != "lost" {
		ds[0], ds[1], lost = ds[1], ds[0], ds[0]
	}
	// The lease of "lost" lapses and another consumer takes it.
	if _, err := pool.Exec(ctx, "UPDATE "+pgdb.Table(schema, "messages")+" SET due = now() WHERE msg_id = 'lost'"); err != nil {
		t.Fatal(err)
	}
	again, err := b.Fetch(ctx, "q", 1, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != "lost" {
		t.Fatalf("redelivery of lost: %v, %v", again, err)
	}
	fin := time.Now().UTC().Truncate(time.Microsecond)
	success := func(id string) *driver.TaskState {
		return &driver.TaskState{TaskUUID: id, TaskName: "t", State: driver.StateSuccess, Attempt: 1,
			Results: []driver.Result{{Type: "int", Value: []byte("7")}}, CreatedAt: fin, StartedAt: fin, FinishedAt: fin}
	}
	var errs []error
	if k := count(ctx, func(ctx context.Context) {
		errs = c.Settle(ctx, ds, []*driver.TaskState{success(ds[0].ID), success(ds[1].ID)})
	}); k != 1 {
		t.Errorf("a co-located Settle ran %d statements; want 1 (driver.Colocation: one step)", k)
	}
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], driver.ErrLeaseLost) {
		t.Fatalf("Settle of a leased delivery and a lost lease = %v; want nil and ErrLeaseLost", errs)
	}
	for _, id := range []string{"ok", "lost"} {
		if st := stateOf(t, be, id); st == nil || st.State != driver.StateSuccess || string(st.Results[0].Value) != "7" || !st.FinishedAt.Equal(fin) {
			t.Errorf("after Settle task %s is %+v; want its SUCCESS written (a lost lease's too)", id, st)
		}
	}
	if got := rows(t, pool, schema, "messages", "msg_id = 'ok'"); got != 0 {
		t.Errorf("Settle left the acked message in the queue")
	}
	if got := rows(t, pool, schema, "messages", "msg_id = 'lost' AND leased AND deliveries = 2"); got != 1 {
		t.Errorf("Settle of a lost lease touched the other consumer's delivery; want it still leased")
	}
	if errs := b.Ack(ctx, again); errs != nil && errs[0] != nil {
		t.Errorf("the other consumer's Ack after a lost lease's Settle: %v", errs[0])
	}
	page, err := b.List(ctx, "q", driver.ListCompleted, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 {
		t.Errorf("List(completed) after a co-located Settle and an Ack = %d messages; want 2 (ackedToCompleted)", len(page))
	}
}

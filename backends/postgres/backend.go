package postgresbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// Options configures a Backend. The zero value is valid.
type Options struct {
	// Schema is the PostgreSQL schema holding errand's tables, created
	// by Migrate. Default: "errand".
	Schema string
	// ResultExpiry is how long a task's state is kept after its last
	// write. Default: 1h.
	ResultExpiry time.Duration
	// GroupExpiry is how long a group's metadata is kept after its
	// creation and after each completion of a member. Default: 24h;
	// never less than ResultExpiry.
	GroupExpiry time.Duration
	// CallTimeout bounds each call that has no earlier ctx deadline,
	// waiting for a free connection of the pool included (WaitState's
	// wait is not bounded: each of its reads is). Negative: no bound.
	// Default: 10s.
	CallTimeout time.Duration
	// RetentionInterval is how often the backend removes expired rows
	// (states past their result expiry, groups past their group
	// expiry), in batches of RetentionBatch rows, one short statement
	// each (see the package doc, Retention). Negative: never; another
	// process on the same schema then has to. Default: 30s.
	RetentionInterval time.Duration
	// RetentionBatch is the most rows one statement of the retention
	// sweep deletes. Default: 1000.
	RetentionBatch int
	// PollInterval is how often WaitState reads the state again when no
	// notification came (a notification lost while the listening
	// connection was down). Default: 1s.
	PollInterval time.Duration
	// Logger receives what the backend's own goroutines cannot return:
	// a failed retention sweep, a lost listening connection, at Warn.
	// Default: nil, which discards them.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultSchema            = pgdb.DefaultSchema
	DefaultCallTimeout       = 10 * time.Second
	DefaultRetentionInterval = 30 * time.Second
	DefaultRetentionBatch    = 1000
	DefaultPollInterval      = time.Second
)

// Backend is a driver.Backend on PostgreSQL. It is safe for concurrent
// use.
type Backend struct {
	pool    *pgxpool.Pool
	ownPool bool // Open made the pool: Close closes it
	opts    Options
	loc     *pgdb.Location
	q       queries
	closed  atomic.Bool
	life    context.Context // cancelled by Close: stops the goroutines of wg
	stop    context.CancelFunc
	wg      sync.WaitGroup
	waiters *waiters
	closeMu sync.Once
	logger  *slog.Logger
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Expirer       = (*Backend)(nil)
	_ driver.StateWaiter   = (*Backend)(nil)
	_ driver.Starter       = (*Backend)(nil)
	_ driver.PendingWriter = (*Backend)(nil)
	_ driver.Located       = (*Backend)(nil)
	_ driver.Transactor    = (*Backend)(nil)
	_ driver.Canceller     = (*Backend)(nil)
)

// Errors New and Open answer with when the schema is not at this build's
// version (errors.Is them; pgdb's SchemaError says which versions).
var (
	ErrNoSchema  = pgdb.ErrNoSchema
	ErrSchemaOld = pgdb.ErrSchemaOld
	ErrSchemaNew = pgdb.ErrSchemaNew
)

// Migrate creates or upgrades the schema of errand's tables (the
// broker's and the backend's, one version for both) to this build's
// version, in one transaction. It never downgrades: a newer schema
// answers ErrSchemaNew.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return pgdb.Migrate(ctx, pool, schema) // "": DefaultSchema
}

// New returns a backend on pool, the caller's own (Close leaves it
// open), after checking that the schema is at this build's version
// (ErrNoSchema, ErrSchemaOld, ErrSchemaNew otherwise: run Migrate). opts
// may be nil.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Backend, error) {
	b := &Backend{pool: pool}
	if opts != nil {
		b.opts = *opts
	}
	o := &b.opts
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	o.ResultExpiry, o.GroupExpiry = driver.ExpiryDefaults(o.ResultExpiry, o.GroupExpiry)
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = DefaultRetentionInterval
	}
	if o.RetentionBatch <= 0 {
		o.RetentionBatch = DefaultRetentionBatch
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	b.logger = o.Logger
	if b.logger == nil {
		b.logger = slog.New(slog.DiscardHandler)
	}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	if err := pgdb.Check(cctx, pool, o.Schema); err != nil {
		return nil, b.err(cctx, "check schema", err)
	}
	b.loc = &pgdb.Location{Pool: pool, Schema: o.Schema, Expiry: o.ResultExpiry}
	b.q = newQueries(o.Schema)
	b.life, b.stop = context.WithCancel(context.Background())
	b.waiters = newWaiters(b)
	if o.RetentionInterval > 0 {
		b.wg.Go(b.retain)
	}
	return b, nil
}

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

// Close stops the backend's goroutines (the retention sweep, the
// listener of WaitState) and makes later calls return driver.ErrClosed.
// It closes the pool only when Open made it. A second Close is harmless.
func (b *Backend) Close() error {
	b.closeMu.Do(func() {
		b.closed.Store(true)
		b.waiters.close()
		b.stop()
		b.wg.Wait()
		if b.ownPool {
			b.pool.Close()
		}
	})
	return nil
}

// err wraps err, the failure of the call what, in an error that says
// what happened: the backend closed (driver.ErrClosed), the statement
// cancelled by the server's statement_timeout, no connection of the pool
// free before ctx ended, ctx ended, or the server's own error.
func (b *Backend) err(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	switch {
	case b.closed.Load():
		return fmt.Errorf("postgres backend: %s: %w", what, driver.ErrClosed)
	case errors.As(err, &pgErr) && pgErr.Code == "57014" && ctx.Err() == nil:
		return fmt.Errorf("postgres backend: %s: the statement ran past the server's statement_timeout and was cancelled: %w", what, err)
	case ctx.Err() != nil:
		why := context.Cause(ctx) // ctx.Err(), or a callTimeout of bound
		if err == context.DeadlineExceeded || err == context.Canceled {
			// pgxpool answers ctx.Err() itself when no connection came.
			if s := b.pool.Stat(); s.AcquiredConns() >= s.MaxConns() {
				return fmt.Errorf("postgres backend: %s: no free connection in the pool (all %d in use): %w", what, s.MaxConns(), why)
			}
		}
		return fmt.Errorf("postgres backend: %s: %w", what, why)
	}
	return fmt.Errorf("postgres backend: %s: %w", what, err)
}

// bound returns ctx limited to CallTimeout, unless its own deadline
// comes first.
func (b *Backend) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.opts.CallTimeout < 0 {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.opts.CallTimeout {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, b.opts.CallTimeout, callTimeout{b.opts.CallTimeout})
}

// callTimeout is the cause of a ctx bound ended: the call ran past
// CallTimeout.
type callTimeout struct{ d time.Duration }

func (e callTimeout) Error() string {
	return fmt.Sprintf("no answer within the backend's CallTimeout of %v: %v", e.d, context.DeadlineExceeded)
}

func (e callTimeout) Unwrap() error { return context.DeadlineExceeded }

// SetStates writes sts in one statement (pgdb.SetStatesSQL: an upsert of
// the batch, the last state of a task winning), inside the caller's
// transaction when ctx carries one (driver.Transactor). A state that
// cannot be encoded fails alone; a failed statement fails every state. A
// state other than PENDING of a task that is CANCELLED is not written
// and fails alone with an error wrapping driver.ErrCancelled
// (driver.Canceller); Progress is stored byte for byte.
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	return b.writeStates(ctx, "set states", sts, false)
}

// SetPendingIfAbsent writes each PENDING state where its task has none
// (an expired one counting as none), in one statement: INSERT ... ON
// CONFLICT leaving a live row alone.
func (b *Backend) SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error {
	return b.writeStates(ctx, "set pending states", sts, true)
}

func (b *Backend) writeStates(ctx context.Context, what string, sts []*driver.TaskState, ifAbsent bool) []error {
	if b.closed.Load() {
		return driver.BatchErrors(len(sts), b.err(ctx, what, driver.ErrClosed))
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var errs []error
	var a pgdb.StateArgs
	for i, st := range sts {
		if err := a.Append(st); err != nil {
			if errs == nil {
				errs = make([]error, len(sts))
			}
			errs[i] = fmt.Errorf("postgres backend: %w", err)
		}
	}
	if a.Len() == 0 {
		return errs
	}
	_, refused, err := b.loc.WriteStates(ctx, pgdb.WriterFor(ctx, b.pool), &a, ifAbsent)
	if err != nil {
		err = b.err(ctx, what, err)
		if errs == nil {
			return driver.BatchErrors(len(sts), err)
		}
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	return pgdb.Refused("postgres backend", errs, sts, refused)
}

// GetState reads the task's live state: an expired row, not yet removed
// by the retention sweep, is absent (driver.ErrTaskNotFound).
func (b *Backend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	if b.closed.Load() {
		return nil, b.err(ctx, "get state", driver.ErrClosed)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var body string
	var c, s, f *time.Time
	var p *string
	err := b.pool.QueryRow(ctx, b.q.getState, id).Scan(&body, &c, &s, &f, &p)
	if err == pgx.ErrNoRows {
		return nil, fmt.Errorf("postgres backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	if err != nil {
		return nil, b.err(ctx, "get state of "+id, err)
	}
	st, err := pgdb.DecodeState(id, body, c, s, f, p)
	if err != nil {
		return nil, fmt.Errorf("postgres backend: %w: %w", errDecode, err)
	}
	return st, nil
}

// errDecode marks a state read but not decoded: no retry reads it.
var errDecode = errors.New("a stored state that cannot be decoded")

// Location declares where the backend keeps its task states
// (driver.Located): a *pgdb.Location of its pool, schema and result
// expiry, a type of errand's internal module that only its PostgreSQL
// drivers understand. errand's PostgreSQL broker on the same database
// and schema then records PENDING in the statement of a publish,
// STARTED in its fetch and the final state in its ack.
func (b *Backend) Location() any { return b.loc }

// CheckTx accepts a pgx.Tx on the pool's server, database and user, or
// a *sql.Tx of pgx's stdlib driver (driver.Transactor): SetStates,
// SetPendingIfAbsent and InitGroup then write inside it, one statement
// each.
func (b *Backend) CheckTx(tx any) error { return pgdb.CheckTx(b.pool, tx) }

package postgresbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// Options configures a Broker. The zero value (or nil) is usable.
type Options struct {
	// Schema is the PostgreSQL schema holding errand's tables, created by
	// Migrate (or errand migrate). Default: "errand".
	Schema string
	// MaxPayload is the largest message body the broker accepts, in
	// bytes. 0: DefaultMaxPayload; negative: no limit of errand's own
	// (PostgreSQL's bytea still stops at 1 GB).
	MaxPayload int
	// CallTimeout bounds each statement the broker runs when the caller's
	// ctx has no earlier deadline, so that a server that stops answering
	// fails a call instead of hanging it. It bounds each statement of a
	// blocking Fetch, not the wait between them. Default: 10s; negative:
	// no bound but the ctx's.
	CallTimeout time.Duration
	// PollInterval is the longest a blocking Fetch waits before it looks
	// at its queue again when no notification came: the fallback for a
	// notification lost with the listening connection. Fetch wakes at
	// once on a publish (LISTEN/NOTIFY) and at the due time of the
	// queue's next delayed message or lapsing lease, so this bounds only
	// how late a lost notification is noticed. Default: 1s.
	PollInterval time.Duration
}

// Defaults of Options.
const (
	DefaultSchema       = pgdb.DefaultSchema
	DefaultMaxPayload   = 16 << 20
	DefaultCallTimeout  = 10 * time.Second
	DefaultPollInterval = time.Second
)

// Broker is errand's PostgreSQL broker: see the package doc.
type Broker struct {
	pool    *pgxpool.Pool
	ownPool bool // made by Open: closed by Close
	opts    Options
	sql     statements
	channel string // the LISTEN/NOTIFY channel of the schema
	// cancelChannel is the channel of the schema's cancel notices
	// (cancel.go)
	cancelChannel string

	listen *listener
	notify *notifier

	closeOnce sync.Once
	closed    chan struct{}

	ops opsState // the optional capabilities' statements and sweep (ops.go)
}

var (
	_ driver.Broker     = (*Broker)(nil)
	_ driver.Limiter    = (*Broker)(nil)
	_ driver.Transactor = (*Broker)(nil)
)

// New returns a broker on pool, the application's own: Close leaves it
// open. It checks that the schema is at this build's version
// (pgdb.Check): an error wrapping ErrNoSchema, ErrSchemaOld or
// ErrSchemaNew when it is not (run Migrate or errand migrate).
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Broker, error) {
	if pool == nil {
		return nil, errors.New("postgres broker: New needs a *pgxpool.Pool (nil given)")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	b := &Broker{pool: pool, opts: o, sql: newStatements(o.Schema), channel: channelName(o.Schema),
		cancelChannel: cancelChannelName(o.Schema), closed: make(chan struct{})}
	cctx, cancel := b.bound(ctx)
	defer cancel()
	if err := pgdb.Check(cctx, pool, o.Schema); err != nil {
		return nil, fmt.Errorf("postgres broker: %w", err)
	}
	b.listen = newListener(b)
	b.notify = newNotifier(b)
	return b, nil
}

// Migrate creates errand's tables in schema, or brings them to this
// build's version (pgdb.Migrate): the explicit step New and Open never
// take themselves.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return pgdb.Migrate(ctx, pool, schema) // "": DefaultSchema
}

// The schema errors New and Open answer with (errors.Is-able): the
// schema has no errand tables, or is older or newer than this build's.
var (
	ErrNoSchema  = pgdb.ErrNoSchema
	ErrSchemaOld = pgdb.ErrSchemaOld
	ErrSchemaNew = pgdb.ErrSchemaNew
)

// Limits reports the largest payload (Options.MaxPayload); there is no
// maximum delay, and no most deliveries an Ack takes. It declares
// MaxAckFlights 1: each Ack (or co-located settle) is a statement and a
// commit of its own, whose cost hardly grows with its rows, so the acks
// of a queue that come while one is in flight wait for it and go
// together in the next, a transaction for many tasks instead of one for
// one or two.
func (b *Broker) Limits() driver.Limits {
	return driver.Limits{MaxPayload: max(b.opts.MaxPayload, 0), MaxAckFlights: 1}
}

// CheckTx accepts a pgx.Tx on the broker's database, or a *sql.Tx of a
// database/sql DB opened with pgx's stdlib driver (whose database the
// caller answers for): Publish with a ctx carrying it (errand.WithTx)
// inserts the messages inside it, so they exist, and wake consumers, only
// once it commits.
func (b *Broker) CheckTx(tx any) error { return pgdb.CheckTx(b.pool, tx) }

// Close stops the broker's listening connection and wakes blocked Fetch
// calls (they return driver.ErrClosed); ListenCancel's notices stop. A pool Open made is closed; one
// given to New is left to its owner. A second Close does nothing.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		close(b.closed)
		b.notify.close()
		b.listen.stop()
		b.listen.dropCancels()
		if b.ownPool {
			b.pool.Close()
		}
	})
	return nil
}

func (b *Broker) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// bound returns ctx limited to CallTimeout, unless ctx ends sooner.
func (b *Broker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.opts.CallTimeout < 0 {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.opts.CallTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.opts.CallTimeout)
}

var errClosed = fmt.Errorf("postgres broker: %w", driver.ErrClosed)

// checkOpen answers ErrClosed after Close.
func (b *Broker) checkOpen() error {
	if b.isClosed() {
		return errClosed
	}
	return nil
}

// channelName is the NOTIFY channel of schema: one per schema, whose
// payload is the queue. PostgreSQL channel names stop at 63 bytes.
func channelName(schema string) string {
	c := "errand." + schema
	for len(c) > 63 {
		_, size := utf8.DecodeLastRuneInString(c)
		c = c[:len(c)-size]
	}
	return c
}

// microseconds is d as PostgreSQL intervals count it.
func microseconds(d time.Duration) int64 { return d.Microseconds() }

var errBadHandle = errors.New("postgres broker: the delivery's handle is not this broker's")

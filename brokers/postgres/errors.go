package postgresbroker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors the broker wraps what went wrong in, besides the driver
// package's sentinels (errors.Is-able; the wrapped error is kept).
var (
	// ErrPoolFull: every connection of the pool was in use for as long
	// as the call could wait (its ctx or CallTimeout). Raise the pool's
	// MaxConns (pool_max_conns in a URL) or lower the work sharing it.
	ErrPoolFull = errors.New("the connection pool is full: no connection came free in time")
	// ErrStatementTimeout: the server canceled a statement (SQLSTATE
	// 57014), because it ran longer than statement_timeout (or was
	// canceled by an operator's pg_cancel_backend).
	ErrStatementTimeout = errors.New("the server canceled the statement (SQLSTATE 57014: statement_timeout, or pg_cancel_backend)")
	// ErrConnection: the connection to the server failed or was lost
	// (a restart, a network failure). The pool replaces the connection;
	// the call may be tried again.
	ErrConnection = errors.New("connection to PostgreSQL failed or was lost")
)

// fail wraps err, from the statement of op run under bounded (ctx limited
// by CallTimeout), in an error saying what happened.
func (b *Broker) fail(ctx, bounded context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "57014" && ctx.Err() == nil:
		return fmt.Errorf("postgres broker: %s: %w: %w", op, ErrStatementTimeout, err)
	case pgErr != nil && (pgErr.Severity == "FATAL" || strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")):
		// The server ended the session: terminated, shutting down,
		// starting up, or the connection failed.
		return fmt.Errorf("postgres broker: %s: %w: %w", op, ErrConnection, err)
	case pgErr != nil:
		return fmt.Errorf("postgres broker: %s: %w", op, err)
	case ctx.Err() != nil:
		if b.isClosed() {
			return errClosed
		}
		return fmt.Errorf("postgres broker: %s: %w", op, ctx.Err())
	case bounded.Err() != nil:
		return fmt.Errorf("postgres broker: %s: no answer from the server within %v (Options.CallTimeout): %w", op, b.opts.CallTimeout, err)
	}
	return fmt.Errorf("postgres broker: %s: %w: %w", op, ErrConnection, err)
}

// acquire takes a connection of the pool for op, telling a full pool from
// an unreachable server.
func (b *Broker) acquire(ctx, bounded context.Context, op string) (*pgxpool.Conn, error) {
	c, err := b.pool.Acquire(bounded)
	if err == nil {
		return c, nil
	}
	if bounded.Err() != nil && !b.isClosed() {
		if st := b.pool.Stat(); st.AcquiredConns() >= st.MaxConns() {
			return nil, fmt.Errorf("postgres broker: %s: %w (all %d connections in use while the call waited): %w", op, ErrPoolFull, st.MaxConns(), err)
		}
	}
	return nil, b.fail(ctx, bounded, op, err)
}

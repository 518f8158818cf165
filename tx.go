package errand

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand/driver"
)

// Transactional sends (driver.Transactor): a SendTask, SendChain,
// SendGroup or SendChord whose ctx carries the caller's own transaction
// (WithTx) writes inside it, so that the task exists if and only if the
// transaction commits.
//
//   - The broker must accept the transaction (driver.Transactor, CheckTx
//     nil): else the send fails with ErrTxUnsupported before anything is
//     written (checkTx, at the start of each Send call and again in its
//     base handler, after the send middleware).
//   - The backend writes the states (PENDING, a chord's group) inside the
//     transaction where it accepts it too; else outside it, under a ctx
//     that hides the transaction (stateCtx), as without one.
//   - A send inside a transaction is never joined with other callers'
//     sends or state writes (the coalescers of send.go, colocation.go and
//     internal/portable are bypassed: inTx), and makes one driver call at
//     a time: states first, then the publish, a group's batches one after
//     another whatever SendConcurrency says.
//   - Nothing but a send runs inside a caller's transaction: a worker's
//     steps after a task (its retry, its callbacks, a chain's next task)
//     and Requeue hide any transaction their ctx carries (noTx).

// ErrTxUnsupported is wrapped by the error of a send whose ctx carries a
// transaction (WithTx) that the broker cannot write inside: it is no
// driver.Transactor, or its CheckTx refused the transaction (of another
// type, another server or database). Nothing of such a send is written.
var ErrTxUnsupported = errors.New("errand: the broker cannot send inside this transaction")

// WithTx returns a copy of ctx carrying tx, a transaction of the caller's
// own on the server its drivers use (a pgx.Tx for the PostgreSQL drivers,
// a *memorybroker.Tx for the memory drivers; each driver documents its
// type). SendTask, SendChain, SendGroup and SendChord with that ctx send
// inside tx: the messages exist if and only if tx commits, and so do the
// PENDING states and a chord's group where the backend accepts tx too.
// The caller commits or rolls back tx after the send returns; errand
// never does. A send inside a transaction the broker cannot write inside
// fails with ErrTxUnsupported and writes nothing. A nil tx hides a
// transaction ctx carries. See docs/concepts.md, "Sending inside a
// transaction".
func WithTx(ctx context.Context, tx any) context.Context { return driver.WithTx(ctx, tx) }

// inTx reports whether ctx carries a caller's transaction.
func inTx(ctx context.Context) bool { return driver.TxFrom(ctx) != nil }

// noTx returns ctx without the caller's transaction it may carry: for
// the calls that must never run inside one.
func noTx(ctx context.Context) context.Context {
	if inTx(ctx) {
		return driver.WithTx(ctx, nil)
	}
	return ctx
}

// checkTx returns nil when ctx carries no transaction or one the broker
// can write inside, else an error wrapping ErrTxUnsupported that says why;
// what names the send.
func (s *Server) checkTx(ctx context.Context, what string) error {
	tx := driver.TxFrom(ctx)
	if tx == nil {
		return nil
	}
	tr := s.broker.Can.Transactor
	if tr == nil {
		return fmt.Errorf("errand: %s inside a transaction: %w: broker %T is no driver.Transactor", what, ErrTxUnsupported, s.broker.Drv)
	}
	if err := tr.CheckTx(tx); err != nil {
		return fmt.Errorf("errand: %s inside a transaction: %w: %w", what, ErrTxUnsupported, err)
	}
	return nil
}

// stateCtx returns the ctx of a send's state writes: ctx itself when it
// carries no transaction or the backend accepts it, else ctx with the
// transaction hidden (the backend writes outside it).
func (s *Server) stateCtx(ctx context.Context) context.Context {
	tx := driver.TxFrom(ctx)
	if tx == nil || s.backendTakes(tx) {
		return ctx
	}
	return driver.WithTx(ctx, nil)
}

// backendTakes reports whether the backend writes inside tx.
func (s *Server) backendTakes(tx any) bool {
	tr := s.backend.Transactor
	return tr != nil && tr.CheckTx(tx) == nil
}

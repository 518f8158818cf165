package driver

import "context"

// Transactions: an application that keeps its own data on the server a
// driver uses (a SQL database) can send a task inside its own
// transaction, so that the task exists if and only if the transaction
// commits. The application puts its transaction in the ctx of a send
// (errand.WithTx, which is [WithTx]); errand then asks each driver whether
// it can write inside that transaction ([Transactor]) and, where it can,
// passes the ctx carrying it to the driver's producer calls. A driver
// finds the transaction with [TxFrom]. The transaction is a value of a
// type the driver documents (a pgx.Tx, the memory drivers' *Tx): this
// package names no database.

// txKey is the ctx key of a caller's transaction.
type txKey struct{}

// WithTx returns a copy of ctx carrying tx, a transaction of the caller's
// own on a driver's server (errand.WithTx is the user's name for it). A
// nil tx hides any transaction ctx carries: TxFrom of the copy is nil.
func WithTx(ctx context.Context, tx any) context.Context {
	return context.WithValue(ctx, txKey{}, txValue{tx})
}

// txValue wraps the transaction, so that a nil one is a value too and
// hides an outer one.
type txValue struct{ tx any }

// TxFrom returns the transaction WithTx put in ctx, or nil.
func TxFrom(ctx context.Context) any {
	v, _ := ctx.Value(txKey{}).(txValue)
	return v.tx
}

// Transactor is implemented by a driver (a broker or a backend) that can
// do a producer's writes inside a caller's transaction.
//
// When CheckTx(tx) answers nil, each of the calls below whose ctx carries
// tx (TxFrom(ctx) == tx) is done inside tx and only inside it: nothing the
// call writes is visible to anyone else before tx commits, and nothing of
// it remains after tx rolls back. They are a producer's calls:
//
//   - a broker's Publish, its Colocation.Send, and its Uniquer's Lock and
//     Unlock (a unique key taken in tx is held for others only once tx
//     commits, and a rolled-back send leaves it free);
//   - a backend's SetStates, PendingWriter.SetPendingIfAbsent and
//     InitGroup.
//
// errand passes a ctx carrying tx to them only in a send (errand.WithTx),
// and only to a driver whose CheckTx(tx) answered nil; every other call
// ignores a transaction its ctx may carry (a user's ctx reaching GetState
// through AsyncResult.Get, say). errand never makes two calls with one tx
// at once (a transaction is typically one connection, which runs one
// statement at a time), never joins a call carrying tx with another
// caller's, and never passes a tx to Fetch, Ack or any other consumer
// call: workers never write inside a caller's transaction. A call made
// inside tx neither commits nor rolls it back; the caller does, after
// errand returns. When tx is no longer usable (ended, its connection
// lost) a call returns an error, never blocks or panics.
//
// A Colocation's Send with a ctx carrying tx writes the messages and the
// states inside tx; errand makes that call only when both the broker and
// the backend accepted tx.
type Transactor interface {
	// CheckTx returns nil when tx is a transaction this driver can write
	// inside: of a type the driver documents (a pgx.Tx, the memory
	// drivers' *Tx), on the server and database the driver uses.
	// Otherwise it returns an error saying why (nil, a value of another
	// type, another server or database, a transaction the driver can tell
	// has ended). It must not block or do I/O; a transaction it accepted
	// may still fail in a later call (ended, its connection lost).
	CheckTx(tx any) error
}

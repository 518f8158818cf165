package memorybroker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/memcoloc"
)

// Tx is a transaction of the memory drivers, begun with [Broker.Begin]:
// a send whose ctx carries it (errand.WithTx) is kept in it, seen by no
// worker, until its Commit applies it, or its Rollback drops it. Its
// methods:
//
//	func (tx *Tx) Commit() error   // applies every write of the Tx at once, or none
//	func (tx *Tx) Rollback() error // drops them
//
// Either returns [ErrTxDone] once the Tx has ended.
type Tx = memcoloc.Tx

// ErrTxDone is returned by Commit, Rollback and every send inside a Tx
// once the Tx has been committed or rolled back.
var ErrTxDone = memcoloc.ErrTxDone

var _ driver.Transactor = (*Broker)(nil)

// Begin starts a transaction on the broker, as an application begins one
// on its database: pass it to errand.WithTx, send, then Commit or
// Rollback it. Inside it, the broker keeps the messages published and
// the unique keys taken or freed, and any memory result backend keeps the
// PENDING states and groups written (the process's memory is the memory
// drivers' one server); Commit applies them all in one step of the
// broker — no worker fetches a message of the Tx before its states are
// written — and Rollback drops them. Commit fails, applying nothing, when
// a unique key the Tx took was taken by another task meanwhile (as a
// serialization failure would), or a driver was closed. It does no I/O.
func (b *Broker) Begin() *Tx { return memcoloc.NewTx(&txWrites{b: b}) }

// CheckTx accepts a *Tx begun on b (driver.Transactor) and still open: a
// value of another type, a Tx of another memory broker or an ended one
// gets an error saying which. It does no I/O.
func (b *Broker) CheckTx(tx any) error {
	t, ok := tx.(*Tx)
	if !ok || t == nil {
		return fmt.Errorf("memory broker: a transaction of type %T; want a *memorybroker.Tx begun with Broker.Begin", tx)
	}
	if w, ok := t.Owner().(*txWrites); !ok || w.b != b {
		return errors.New("memory broker: the transaction was begun on another memory broker")
	}
	return t.Check()
}

// txWrites is the broker's side of a Tx (memcoloc.Owner): the messages
// published and the unique keys taken or freed inside it, in order.
type txWrites struct {
	b     *Broker
	msgs  []driver.Message
	locks []txLock
}

// txLock is a Lock (unlock false) or Unlock made inside a Tx.
type txLock struct {
	key, id string
	ttl     time.Duration
	unlock  bool
}

// inTx runs f on the writes of the transaction ctx carries, as one call
// inside it, and reports whether ctx carries one (false: f not run).
func (b *Broker) inTx(ctx context.Context, f func(w *txWrites) error) (bool, error) {
	tx := driver.TxFrom(ctx)
	if tx == nil {
		return false, nil
	}
	if err := b.CheckTx(tx); err != nil {
		return true, err
	}
	t := tx.(*Tx)
	exit, err := t.Enter()
	if err != nil {
		return true, err
	}
	defer exit()
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return true, f(t.Owner().(*txWrites))
}

// publish keeps copies of msgs in the Tx.
func (w *txWrites) publish(msgs []driver.Message) error {
	w.b.mu.Lock()
	closed := w.b.closed
	w.b.mu.Unlock()
	if closed {
		return driver.ErrClosed
	}
	for _, m := range msgs {
		m.Body = slices.Clone(m.Body)
		w.msgs = append(w.msgs, m)
	}
	return nil
}

// lock is Lock inside the Tx: the holder of key as the Tx sees it (the
// broker's lock, then the Tx's own Locks and Unlocks of key), and the
// Lock kept when id may take it.
func (w *txWrites) lock(key, id string, ttl time.Duration) (string, error) {
	b := w.b
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return "", driver.ErrClosed
	}
	now := time.Now()
	l, held := b.locks[key]
	b.mu.Unlock()
	l, held = w.replay(key, l, held, now)
	if held && l.holder != id && l.until.After(now) {
		return l.holder, nil
	}
	w.locks = append(w.locks, txLock{key: key, id: id, ttl: ttl})
	return id, nil
}

// replay applies the Tx's Locks and Unlocks of key, in order, to l (held:
// the lock exists) as of now.
func (w *txWrites) replay(key string, l uniqueLock, held bool, now time.Time) (uniqueLock, bool) {
	for _, op := range w.locks {
		if op.key != key {
			continue
		}
		l, held = op.apply(l, held, now)
	}
	return l, held
}

// apply returns l after op at now, or, for a Lock that another id's live
// lock refuses, l unchanged.
func (op txLock) apply(l uniqueLock, held bool, now time.Time) (uniqueLock, bool) {
	live := held && l.until.After(now)
	switch {
	case op.unlock && held && (l.holder == op.id || !live):
		return uniqueLock{}, false
	case op.unlock, live && l.holder != op.id:
		return l, held
	}
	return uniqueLock{holder: op.id, until: now.Add(op.ttl)}, true
}

// Commit applies the Tx under the broker's lock (memcoloc.Owner): its
// unique keys are checked first (a key another task took since the Tx
// took it fails the commit), then the backends' writes applied (parts),
// then the keys and the messages; with an error, nothing is applied.
func (w *txWrites) Commit(parts func() error) error {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	now := time.Now()
	type state struct {
		l    uniqueLock
		held bool
	}
	view := map[string]state{}
	for _, op := range w.locks {
		s, ok := view[op.key]
		if !ok {
			s.l, s.held = b.locks[op.key]
		}
		if !op.unlock && s.held && s.l.holder != op.id && s.l.until.After(now) {
			return fmt.Errorf("memory broker: unique key %q is held by task %s, which took it after this transaction did", op.key, s.l.holder)
		}
		s.l, s.held = op.apply(s.l, s.held, now)
		view[op.key] = s
	}
	if err := parts(); err != nil {
		return err
	}
	for key, s := range view {
		if !s.held {
			delete(b.locks, key)
			continue
		}
		if b.locks == nil {
			b.locks = make(map[string]uniqueLock)
		}
		b.locks[key] = s.l
	}
	if len(w.msgs) > 0 {
		b.publish(w.msgs...)
	}
	return nil
}

package memcoloc

import (
	"errors"
	"fmt"
	"sync"
)

// ErrTxDone is returned by a call inside a Tx, and by Commit and Rollback,
// once the Tx has been committed or rolled back.
var ErrTxDone = errors.New("memory transaction: already committed or rolled back")

// Tx is a transaction of errand's memory drivers (driver.Transactor),
// begun on a memory broker (memorybroker.Broker.Begin, which exports the
// type as memorybroker.Tx). The writes errand makes inside it — the
// broker's publishes and unique keys, the PENDING states and groups of any
// memory backend of the process — are kept in the Tx, seen by nobody, and
// applied at Commit in one step of the broker (under its lock: no fetch
// sees a message of the Tx before every write of the Tx is applied);
// Rollback drops them. A Tx runs one call at a time: a driver call made
// while another runs inside it fails, as a second statement on one
// database connection would.
//
// Commit and Rollback may be called from any goroutine, once: a second
// call returns ErrTxDone.
type Tx struct {
	mu    sync.Mutex
	owner Owner  // the broker's writes; applied last, under its lock
	parts []Part // the backends' writes, in the order they joined
	keys  []any  // the backend of each part
	ended string // "" while open, else "committed" or "rolled back"
	busy  bool   // a driver call runs inside the Tx
}

// Owner is the broker's side of a Tx: its own writes, and the step that
// applies them with the others'.
type Owner interface {
	// Commit applies the Tx under the broker's lock: it checks that its own
	// writes can still be made, calls parts (which checks and applies the
	// backends' writes), then applies its own. When it returns an error,
	// nothing was applied.
	Commit(parts func() error) error
}

// Part is one backend's writes in a Tx.
type Part interface {
	// Check returns an error when the writes cannot be applied (the
	// backend is closed).
	Check() error
	// Apply applies the writes, in the order they were made, in one step
	// of the backend.
	Apply()
}

// NewTx returns an open Tx whose broker side is owner.
func NewTx(owner Owner) *Tx { return &Tx{owner: owner} }

// Owner returns the broker side of the Tx (the broker's CheckTx tells its
// own by it).
func (tx *Tx) Owner() Owner { return tx.owner }

// Check returns nil while the Tx is open, else ErrTxDone. It does no I/O.
func (tx *Tx) Check() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.ended != "" {
		return fmt.Errorf("%w (%s)", ErrTxDone, tx.ended)
	}
	return nil
}

// Enter begins a driver call inside the Tx and returns the func that ends
// it. It fails when the Tx has ended or another call runs inside it.
func (tx *Tx) Enter() (exit func(), err error) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	switch {
	case tx.ended != "":
		return nil, fmt.Errorf("%w (%s)", ErrTxDone, tx.ended)
	case tx.busy:
		return nil, errors.New("memory transaction: two calls at once inside one transaction (a transaction runs one call at a time: driver.Transactor)")
	}
	tx.busy = true
	return func() {
		tx.mu.Lock()
		tx.busy = false
		tx.mu.Unlock()
	}, nil
}

// Part returns the part of the backend key, made by mk when the backend
// has none yet. Call it between Enter and its exit.
func (tx *Tx) Part(key any, mk func() Part) Part {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	for i, k := range tx.keys {
		if k == key {
			return tx.parts[i]
		}
	}
	p := mk()
	tx.keys, tx.parts = append(tx.keys, key), append(tx.parts, p)
	return p
}

// Commit applies every write of the Tx in one step of its broker, or
// none: when a write can no longer be made (a unique key another task
// took meanwhile, a driver closed) it returns an error saying which, and
// the Tx is rolled back. It fails without ending the Tx while a call runs
// inside it.
func (tx *Tx) Commit() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if err := tx.endable(); err != nil {
		return err
	}
	err := tx.owner.Commit(func() error {
		for _, p := range tx.parts {
			if err := p.Check(); err != nil {
				return err
			}
		}
		for _, p := range tx.parts {
			p.Apply()
		}
		return nil
	})
	if err != nil {
		tx.ended = "rolled back"
		return fmt.Errorf("memory transaction: commit failed, rolled back: %w", err)
	}
	tx.ended = "committed"
	return nil
}

// Rollback drops every write of the Tx. It fails without ending the Tx
// while a call runs inside it.
func (tx *Tx) Rollback() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if err := tx.endable(); err != nil {
		return err
	}
	tx.ended = "rolled back"
	return nil
}

// endable returns why the Tx cannot end now, or nil; tx.mu must be held.
func (tx *Tx) endable() error {
	switch {
	case tx.ended != "":
		return fmt.Errorf("%w (%s)", ErrTxDone, tx.ended)
	case tx.busy:
		return errors.New("memory transaction: committed or rolled back while a call runs inside it")
	}
	return nil
}

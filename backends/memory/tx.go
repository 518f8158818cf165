package memorybackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/memcoloc"
)

// CheckTx accepts an open transaction of the memory drivers (a
// memorybroker.Tx, begun with memorybroker.Broker.Begin; driver.Transactor):
// SetStates, SetPendingIfAbsent and InitGroup with a ctx carrying it keep
// their writes in the Tx, and its Commit applies them, under the
// backend's lock, in the step that publishes the Tx's messages. Any
// memory broker's Tx is accepted: the memory drivers' one server is the
// process. A value of another type, or an ended Tx, gets an error. It
// does no I/O.
func (b *Backend) CheckTx(tx any) error {
	t, ok := tx.(*memcoloc.Tx)
	if !ok || t == nil {
		return fmt.Errorf("memory backend: a transaction of type %T; want a *memorybroker.Tx begun with memorybroker.Broker.Begin", tx)
	}
	return t.Check()
}

// txStates is the backend's part of a Tx (memcoloc.Part): the state
// writes and groups made inside it, in order.
type txStates struct {
	b   *Backend
	ops []txOp
}

// txOp is one write inside a Tx: states (copies), or a group when group
// is set.
type txOp struct {
	sts      []*driver.TaskState
	ifAbsent bool
	group    string
	members  []string
}

// inTx runs f on the backend's part of the transaction ctx carries, as
// one call inside it, and reports whether ctx carries one (false: f not
// run).
func (b *Backend) inTx(ctx context.Context, f func(p *txStates)) (bool, error) {
	tx := driver.TxFrom(ctx)
	if tx == nil {
		return false, nil
	}
	if err := b.CheckTx(tx); err != nil {
		return true, err
	}
	t := tx.(*memcoloc.Tx)
	exit, err := t.Enter()
	if err != nil {
		return true, err
	}
	defer exit()
	if err := ctx.Err(); err != nil {
		return true, err
	}
	if err := b.open(); err != nil {
		return true, err
	}
	f(t.Part(b, func() memcoloc.Part { return &txStates{b: b} }).(*txStates))
	return true, nil
}

// open returns driver.ErrClosed once the backend is closed.
func (b *Backend) open() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	return nil
}

func (p *txStates) setStates(sts []*driver.TaskState, ifAbsent bool) {
	cp := make([]*driver.TaskState, len(sts))
	for i, st := range sts {
		cp[i] = st.Copy()
	}
	p.ops = append(p.ops, txOp{sts: cp, ifAbsent: ifAbsent})
}

func (p *txStates) initGroup(groupUUID string, taskUUIDs []string) {
	p.ops = append(p.ops, txOp{group: groupUUID, members: slices.Clone(taskUUIDs)})
}

// Check returns driver.ErrClosed once the backend is closed.
func (p *txStates) Check() error { return p.b.open() }

// Apply writes the Tx's states and groups in order, under one lock (a
// backend closed since Check takes nothing). A state other than PENDING
// over a CANCELLED one is dropped, as SetStates refuses it: a commit
// cannot answer per state.
func (p *txStates) Apply() {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	now := time.Now()
	for _, op := range p.ops {
		if op.group != "" {
			b.initGroup(op.group, op.members, now)
			continue
		}
		b.setLocked(op.sts, op.ifAbsent, now)
	}
}

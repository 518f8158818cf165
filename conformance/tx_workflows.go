package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// Worker/Tx/Workflows (tx.go): a chain, a group and a chord sent inside a
// caller's transaction, rolled back and committed.

// txFlows is one of each workflow, made for a run.
type txFlows struct {
	chain *errand.Chain
	group *errand.Group
	chord *errand.Chord
}

func newTxFlows(t testing.TB) txFlows {
	var f txFlows
	var err error
	second := errand.NewSignature(txTask, "c2")
	second.Immutable = true // the task takes one argument
	if f.chain, err = errand.NewChain(errand.NewSignature(txTask, "c1"), second); err != nil {
		t.Fatal(err)
	}
	if f.group, err = errand.NewGroup(errand.NewSignature(txTask, "g1"), errand.NewSignature(txTask, "g2"), errand.NewSignature(txTask, "g3")); err != nil {
		t.Fatal(err)
	}
	members, err := errand.NewGroup(errand.NewSignature(txTask, "k1"), errand.NewSignature(txTask, "k2"))
	if err != nil {
		t.Fatal(err)
	}
	cb := errand.NewSignature("conformance.tx-cb", "cb")
	if f.chord, err = errand.NewChord(members, cb); err != nil {
		t.Fatal(err)
	}
	return f
}

// ids returns every task of f, the chord's callback last.
func (f txFlows) ids() []string {
	var out []string
	for _, sig := range slices.Concat(f.chain.Tasks, f.group.Tasks, f.chord.Group.Tasks) {
		out = append(out, sig.UUID)
	}
	return append(out, f.chord.Callback.UUID)
}

// sendFlows sends each workflow of f inside ctx's transaction.
func (c *txCase) sendFlows(ctx context.Context, f txFlows) {
	c.t.Helper()
	if _, err := c.srv.SendChain(ctx, f.chain); err != nil {
		c.t.Fatalf("SendChain inside a transaction %s: %v", c.path(), err)
	}
	if _, err := c.srv.SendGroup(ctx, f.group, errand.SendConcurrency(4)); err != nil {
		c.t.Fatalf("SendGroup inside a transaction %s: %v", c.path(), err)
	}
	if _, err := c.srv.SendChord(ctx, f.chord, errand.SendConcurrency(4)); err != nil {
		c.t.Fatalf("SendChord inside a transaction %s: %v", c.path(), err)
	}
}

func txWorkflows(t testing.TB, p workerPair) {
	if !transactional(t, p) {
		return
	}
	txPaths(t, p, func(c *txCase) {
		// Rolled back: nothing delivered, nothing left.
		ctx, _, rollback, backendIn := c.begin()
		gone := newTxFlows(c.t)
		c.sendFlows(ctx, gone)
		if err := rollback(); err != nil {
			c.t.Fatalf("rollback: %v", err)
		}
		c.unseen(gone.ids(), "after a rolled-back chain, group and chord", "a rolled-back send leaves no message")
		if backendIn {
			for _, id := range gone.ids() {
				c.noState(id, "workflow task", "after the rollback", "a rolled-back send leaves no state")
			}
			if sts, err := c.be.GroupStates(c.ctx, gone.chord.Group.GroupUUID); !errors.Is(err, driver.ErrGroupNotFound) {
				c.t.Errorf("transactional send promise broken: after the rollback, the chord's group %s reads %d states, %v; want driver.ErrGroupNotFound (a rolled-back SendChord leaves no group) %s", gone.chord.Group.GroupUUID, len(sts), err, c.path())
			}
		}

		// Committed: every task runs once, the callback once.
		ctx, commit, _, _ := c.begin()
		f := newTxFlows(c.t)
		c.sendFlows(ctx, f)
		c.unseen(f.ids(), "before the commit of a chain, group and chord", "no consumer sees a task of a transaction not yet committed")
		if err := commit(); err != nil {
			c.t.Fatalf("commit: %v", err)
		}
		c.queued(len(f.chain.Tasks[:1])+len(f.group.Tasks)+len(f.chord.Group.Tasks), "after the commit of a chain, group and chord")
		c.start(errand.WorkerConfig{Concurrency: 4})
		var last string
		if err := c.srv.Result(f.chain.Tasks[1].UUID).GetInto(c.ctx, &last); err != nil || last != "c2!" {
			c.t.Errorf("transactional send promise broken: the chain sent inside a committed transaction ended %q, %v; want c2! %s", last, err, c.path())
		}
		for _, sig := range f.group.Tasks {
			if _, err := c.srv.Result(sig.UUID).Get(c.ctx); err != nil {
				c.t.Errorf("transactional send promise broken: group member %s sent inside a committed transaction: %v %s", sig.UUID, err, c.path())
			}
		}
		var got string
		if err := c.srv.Result(f.chord.Callback.UUID).GetInto(c.ctx, &got); err != nil || got != "cb+k1!+k2!" {
			c.t.Errorf("transactional send promise broken: the chord sent inside a committed transaction gave its callback %q, %v; want cb+k1!+k2! %s", got, err, c.path())
		}
		c.onceEach("after the commit of a chain, group and chord", f.ids()...)
		for _, id := range gone.ids() {
			if n := c.runCount(id); n != 0 {
				c.t.Errorf("transactional send promise broken: task %s of a rolled-back workflow ran %d times %s", id, n, c.path())
			}
		}
	})
}

package memorybroker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// The memory drivers' transaction (memorybroker.Tx) on its own, beyond
// the conformance kit's Worker/Tx cases: what CheckTx refuses, a unique
// key taken meanwhile failing the commit, the end of a Tx, and one call
// at a time.

func TestTxCheckRefusesStrangers(t *testing.T) {
	b, other := memorybroker.New(nil), memorybroker.New(nil)
	defer b.Close()
	defer other.Close()
	be := memorybackend.New(nil)
	defer be.Close()
	if err := b.CheckTx(b.Begin()); err != nil {
		t.Fatalf("CheckTx of the broker's own open Tx: %v", err)
	}
	if err := be.CheckTx(b.Begin()); err != nil {
		t.Fatalf("the memory backend's CheckTx of a memory Tx: %v", err)
	}
	for what, tx := range map[string]any{"nil": nil, "a string": "tx", "another broker's Tx": other.Begin(), "a nil *Tx": (*memorybroker.Tx)(nil)} {
		if err := b.CheckTx(tx); err == nil {
			t.Errorf("CheckTx accepted %s; want an error", what)
		}
	}
	if err := be.CheckTx("tx"); err == nil {
		t.Errorf("the memory backend's CheckTx accepted a string; want an error")
	}
	ended := b.Begin()
	if err := ended.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := b.CheckTx(ended); !errors.Is(err, memorybroker.ErrTxDone) {
		t.Errorf("CheckTx of a rolled-back Tx = %v; want ErrTxDone", err)
	}
	if err := be.CheckTx(ended); !errors.Is(err, memorybroker.ErrTxDone) {
		t.Errorf("the backend's CheckTx of a rolled-back Tx = %v; want ErrTxDone", err)
	}
	if err := ended.Commit(); !errors.Is(err, memorybroker.ErrTxDone) {
		t.Errorf("Commit after Rollback = %v; want ErrTxDone", err)
	}
	if err := b.Publish(errand.WithTx(t.Context(), ended), msg("late", time.Time{})); !errors.Is(err, memorybroker.ErrTxDone) {
		t.Errorf("Publish inside a rolled-back Tx = %v; want ErrTxDone", err)
	}
	if err := b.Publish(errand.WithTx(t.Context(), other.Begin()), msg("stray", time.Time{})); err == nil {
		t.Errorf("Publish inside another broker's Tx succeeded; want an error")
	}
	if s, _ := b.Stats(t.Context(), "q"); s.Pending != 0 {
		t.Errorf("refused publishes left %d messages", s.Pending)
	}
}

// TestTxCommitAppliesAllOrNothing: a Tx publishes, writes PENDING and
// takes a unique key; before its commit nothing is visible; a key another
// task took meanwhile fails the commit and nothing of the Tx is applied;
// a Tx whose key is free applies everything.
func TestTxCommitAppliesAllOrNothing(t *testing.T) {
	ctx := t.Context()
	b := memorybroker.New(nil)
	defer b.Close()
	be := memorybackend.New(nil)
	defer be.Close()
	write := func(tx *memorybroker.Tx, id string) {
		t.Helper()
		tctx := errand.WithTx(ctx, tx)
		if err := b.Publish(tctx, msg(id, time.Time{})); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(be.SetPendingIfAbsent(tctx, []*errand.TaskState{{TaskUUID: id, State: errand.StatePending}})...); err != nil {
			t.Fatal(err)
		}
		if holder, err := b.Lock(tctx, "key", id, time.Minute); err != nil || holder != id {
			t.Fatalf("Lock inside the Tx = %q, %v; want %q", holder, err, id)
		}
	}
	lost := b.Begin()
	write(lost, "lost")
	if s, _ := b.Stats(ctx, "q"); s.Pending != 0 {
		t.Fatalf("before the commit the queue holds %d messages; want 0", s.Pending)
	}
	if _, err := be.GetState(ctx, "lost"); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Fatalf("before the commit the state reads %v; want ErrTaskNotFound", err)
	}
	if holder, err := b.Lock(ctx, "key", "other", time.Minute); err != nil || holder != "other" {
		t.Fatalf("Lock outside the Tx of a key the Tx took = %q, %v; want it free until the commit", holder, err)
	}
	if err := lost.Commit(); err == nil {
		t.Fatal("Commit of a Tx whose unique key another task took meanwhile succeeded; want an error, nothing applied")
	}
	if s, _ := b.Stats(ctx, "q"); s.Pending != 0 {
		t.Errorf("a failed commit published %d messages; want none", s.Pending)
	}
	if _, err := be.GetState(ctx, "lost"); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Errorf("a failed commit wrote the state: %v", err)
	}
	if err := b.Unlock(ctx, "key", "other"); err != nil {
		t.Fatal(err)
	}

	won := b.Begin()
	write(won, "won")
	if err := won.Commit(); err != nil {
		t.Fatal(err)
	}
	if s, _ := b.Stats(ctx, "q"); s.Pending != 1 {
		t.Errorf("after the commit the queue holds %d messages; want 1", s.Pending)
	}
	if st, err := be.GetState(ctx, "won"); err != nil || st.State != errand.StatePending {
		t.Errorf("after the commit the state reads %v, %v; want PENDING", st, err)
	}
	if holder, _ := b.Lock(ctx, "key", "third", time.Minute); holder != "won" {
		t.Errorf("after the commit the key is held by %q; want won", holder)
	}
}

// blockingCtx is a ctx whose Err blocks until release is closed, after
// signalling entered: a driver call inside a Tx under it stays in the Tx.
type blockingCtx struct {
	context.Context
	entered chan struct{}
	release chan struct{}
}

func (c blockingCtx) Err() error {
	close(c.entered)
	<-c.release
	return nil
}

// TestTxOneCallAtATime: while a call runs inside a Tx, a second call, a
// Commit and a Rollback fail (a Tx is one connection), and the Tx is
// usable again once the call ends.
func TestTxOneCallAtATime(t *testing.T) {
	b := memorybroker.New(nil)
	defer b.Close()
	tx := b.Begin()
	bc := blockingCtx{Context: errand.WithTx(t.Context(), tx), entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- b.Publish(bc, msg("first", time.Time{})) }()
	<-bc.entered
	if err := b.Publish(errand.WithTx(t.Context(), tx), msg("second", time.Time{})); err == nil {
		t.Error("a second call inside a Tx while one runs succeeded; want an error")
	}
	if err := tx.Commit(); err == nil {
		t.Error("Commit while a call runs inside the Tx succeeded; want an error")
	}
	if err := tx.Rollback(); err == nil {
		t.Error("Rollback while a call runs inside the Tx succeeded; want an error")
	}
	close(bc.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if s, _ := b.Stats(t.Context(), "q"); s.Pending != 1 {
		t.Errorf("after the commit the queue holds %d messages; want the first alone", s.Pending)
	}
}

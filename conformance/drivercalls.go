package conformance

import (
	"context"
	"errors"
	"fmt"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// The kit reaches a driver's settlement calls and optional capabilities
// through package driver's interfaces, on the value a harness made, never
// through errand's operator calls: these helpers assert the interface and
// answer an error satisfying errors.ErrUnsupported where the driver lacks
// it (the Capabilities cases check the declarations).

// unsupportedBy is the error of a helper whose driver lacks a capability.
func unsupportedBy(v any, what string) error {
	return fmt.Errorf("%T is no %s: %w", v, what, errors.ErrUnsupported)
}

// ackOne acks d alone, through b's batch-shaped Ack, and returns its error.
// An answer of another length than one breaks the batch convention.
func ackOne(ctx context.Context, b errand.Broker, d *driver.Delivery) error {
	return oneAnswer(b.Ack(ctx, []*driver.Delivery{d}), "Ack of one delivery")
}

// setOne writes st alone, through b's batch-shaped SetStates.
func setOne(ctx context.Context, b errand.Backend, st *errand.TaskState) error {
	return oneAnswer(b.SetStates(ctx, []*errand.TaskState{st}), "SetStates of one state")
}

// oneAnswer is the error of a batch call of one item whose answer is
// errs: nil, errs[0], or an error saying call broke the convention.
func oneAnswer(errs []error, call string) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("batch convention broken: %s answered %d errors %v, want nil or one", call, len(errs), errs)
}

// checkAnswer checks a batch call's answer errs for n items against the
// convention (nil, or exactly one error per item) and returns one error
// per item; a wrong length is an error of its own.
func checkAnswer(method string, n int, errs []error) ([]error, error) {
	switch {
	case errs == nil:
		return make([]error, n), nil
	case len(errs) != n:
		return nil, fmt.Errorf("batch convention broken: %s of %d items answered %d errors %v; want nil, or exactly one error per item in order", method, n, len(errs), errs)
	}
	return errs, nil
}

// statsOf counts queue on b (driver.StatsReporter).
func statsOf(ctx context.Context, b errand.Broker, queue string) (driver.QueueStats, error) {
	s, ok := b.(driver.StatsReporter)
	if !ok {
		return driver.QueueStats{}, unsupportedBy(b, "driver.StatsReporter")
	}
	return s.Stats(ctx, queue)
}

// purgeOf purges queue on b (driver.Purger).
func purgeOf(ctx context.Context, b errand.Broker, queue string) (int, error) {
	p, ok := b.(driver.Purger)
	if !ok {
		return 0, unsupportedBy(b, "driver.Purger")
	}
	return p.Purge(ctx, queue)
}

// listOf lists up to 10 000 messages of queue in state l on b
// (driver.Lister).
func listOf(ctx context.Context, b errand.Broker, queue string, l driver.ListState) ([]driver.Listed, error) {
	ls, ok := b.(driver.Lister)
	if !ok {
		return nil, unsupportedBy(b, "driver.Lister")
	}
	return ls.List(ctx, queue, l, 0, 10_000)
}

// setAsideOf lists up to 10 000 entries of queue's archive on b
// (driver.Archiver), newest first, each entry's Error after its Reason
// where it says more: the text a set-aside message's reason is checked
// against.
func setAsideOf(ctx context.Context, b errand.Broker, queue string) ([]driver.ArchiveEntry, error) {
	a, ok := b.(driver.Archiver)
	if !ok {
		return nil, unsupportedBy(b, "driver.Archiver")
	}
	es, err := a.Archived(ctx, queue, 0, 10_000)
	for i := range es {
		if es[i].Error != "" && es[i].Error != es[i].Reason {
			es[i].Reason += ": " + es[i].Error
		}
	}
	return es, err
}

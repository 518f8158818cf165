// Package memcoloc is the location errand's memory result backend
// declares (driver.Located) and its memory broker understands
// (driver.Colocator): the backend's own store of task states, which the
// broker writes in the call of a publish, a fetch or an ack. It is
// internal so that no other driver can declare it, and the backend
// exports nothing for the broker.
//
// It also holds the memory drivers' transaction (Tx, driver.Transactor),
// which both understand: begun on the broker, written in by the broker
// and by any memory backend, applied at its Commit.
package memcoloc

import (
	"context"

	"github.com/errand-go/errand/driver"
)

// States is a memory backend's store of task states, as the broker uses
// it: the backend's own Start, SetPendingIfAbsent and SetStates.
type States interface {
	Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult
	SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error
	SetStates(ctx context.Context, sts []*driver.TaskState) []error
}

// Location is what a memory backend's Location returns: its states.
type Location struct {
	States States
}

package driver

import (
	"context"
	"time"
)

// ScheduleStore is implemented by brokers that keep periodic schedules for
// every scheduler replica sharing the broker (the module
// github.com/errand-go/errand/schedule): the schedules' definitions, and
// per schedule the latest tick some replica claimed. The claim is what
// makes each tick run once however many replicas run: it is an atomic
// compare-and-set on the broker's server, never a leader election.
//
// The state of a schedule is bounded: its definition and one claimed tick,
// never a record per tick. Ticks are compared at millisecond precision
// (a driver may keep milliseconds); errand's ticks are whole seconds.
//
// All methods may be called concurrently, from any number of processes.
type ScheduleStore interface {
	// PutSchedule stores data (errand's encoding, opaque to the driver) as
	// the definition of schedule id, replacing what it had. The claimed
	// tick, if any, is kept.
	PutSchedule(ctx context.Context, id string, data []byte) error

	// DeleteSchedule removes schedule id and its claimed tick, in one
	// atomic step. Unknown IDs are not an error.
	DeleteSchedule(ctx context.Context, id string) error

	// Schedules returns every stored definition, by schedule ID.
	Schedules(ctx context.Context) (map[string][]byte, error)

	// ClaimTick records tick as the latest claimed tick of schedule id and
	// reports true, if id is a stored schedule and tick is later than the
	// tick recorded (or none is); otherwise it changes nothing and reports
	// false. Atomic: of any number of concurrent claims of one (id, tick),
	// exactly one reports true; a claim of a tick no later than one already
	// claimed reports false.
	ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error)

	// LastTick returns the latest tick claimed for schedule id; the zero
	// time when none was (or id is unknown).
	LastTick(ctx context.Context, id string) (time.Time, error)
}

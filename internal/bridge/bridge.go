// Package bridge hands errand's own packages in other modules (the
// periodic scheduler, github.com/errand-go/errand/schedule, and the
// conformance kit) what package errand keeps out of its public API. Go's
// internal rule is by import path, so every package under
// github.com/errand-go/errand may import it, whatever its module; users
// cannot.
//
// Package errand sets each function in its init, so a package that imports
// errand finds them set.
package bridge

import "github.com/errand-go/errand/driver"

var (
	// ScheduleStore returns the broker of srv (an *errand.Server) as a
	// driver.ScheduleStore in errand's portable layer (closed and ctx
	// checks as for every other call), or an error satisfying
	// errors.Is(err, errors.ErrUnsupported) when the broker keeps no
	// schedules.
	ScheduleStore func(srv any) (driver.ScheduleStore, error)

	// PortableBroker returns the broker of srv (an *errand.Server) in
	// errand's portable layer, as the server itself calls it.
	PortableBroker func(srv any) driver.Broker
)

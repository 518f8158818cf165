package errand

import (
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/bridge"
)

// What packages of this module outside the root reach of a Server
// through internal/bridge: the periodic scheduler (package schedule) its
// schedule store, the conformance kit its broker in the portable layer.
func init() {
	bridge.ScheduleStore = func(srv any) (driver.ScheduleStore, error) { return srv.(*Server).scheduleStore() }
	bridge.PortableBroker = func(srv any) driver.Broker { return srv.(*Server).broker }
}

// scheduleStore returns the server's broker as a driver.ScheduleStore, in
// the server's portable layer, for the periodic scheduler
// (github.com/errand-go/errand/schedule, through internal/bridge). It
// returns an error satisfying errors.Is(err, errors.ErrUnsupported) when
// the broker keeps no schedules.
func (s *Server) scheduleStore() (driver.ScheduleStore, error) { return s.broker.ScheduleStore() }

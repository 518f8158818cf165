package errand

import (
	"context"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/bridge"
)

func init() {
	bridge.ScheduleStore = func(srv any) (driver.ScheduleStore, error) { return srv.(*Server).scheduleStore() }
	bridge.PortableBroker = func(srv any) driver.Broker { return srv.(*Server).broker }
}

// scheduleStore returns the server's broker as a driver.ScheduleStore, in
// the server's portable layer (closed and ctx checks as for every other
// call), for the periodic scheduler (github.com/errand-go/errand/schedule,
// through internal/bridge). It returns an error satisfying
// errors.Is(err, errors.ErrUnsupported) when the broker keeps no schedules.
func (s *Server) scheduleStore() (driver.ScheduleStore, error) {
	st := s.broker.can.schedules
	if st == nil {
		return nil, unsupported("schedules", s.broker.drv)
	}
	return &scheduleStore{pb: s.broker, st: st}, nil
}

// scheduleStore is a driver.ScheduleStore in the portable layer.
type scheduleStore struct {
	pb *broker
	st driver.ScheduleStore
}

func (s *scheduleStore) PutSchedule(ctx context.Context, id string, data []byte) error {
	if err := s.pb.before(ctx); err != nil {
		return err
	}
	return s.pb.after(ctx, s.st.PutSchedule(ctx, id, data))
}

func (s *scheduleStore) DeleteSchedule(ctx context.Context, id string) error {
	if err := s.pb.before(ctx); err != nil {
		return err
	}
	return s.pb.after(ctx, s.st.DeleteSchedule(ctx, id))
}

func (s *scheduleStore) Schedules(ctx context.Context) (map[string][]byte, error) {
	if err := s.pb.before(ctx); err != nil {
		return nil, err
	}
	m, err := s.st.Schedules(ctx)
	return m, s.pb.after(ctx, err)
}

func (s *scheduleStore) ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error) {
	if err := s.pb.before(ctx); err != nil {
		return false, err
	}
	ok, err := s.st.ClaimTick(ctx, id, tick)
	if err != nil {
		return false, s.pb.after(ctx, err)
	}
	return ok, nil
}

func (s *scheduleStore) LastTick(ctx context.Context, id string) (time.Time, error) {
	if err := s.pb.before(ctx); err != nil {
		return time.Time{}, err
	}
	t, err := s.st.LastTick(ctx, id)
	return t, s.pb.after(ctx, err)
}

package errand

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/coalesce"
)

// The portable layer: every driver errand uses is wrapped in a *broker or a
// *backend, which own what each driver would otherwise repeat:
//
//   - closed checks: after Close every call returns ErrClosed without
//     reaching the driver, and Close reaches the driver once;
//   - ctx checks: a call whose ctx is already done returns ctx.Err() without
//     reaching the driver, and an error returned while ctx is done satisfies
//     errors.Is(err, ctx.Err()) whatever the driver wrapped;
//   - the driver's optional abilities, discovered once when it is wrapped
//     (abilities.go) and each called through use, which makes both checks;
//   - payload limits, checked against the driver's Limits before anything
//     of a batch is sent;
//   - the batch error convention of driver/doc.go, checked on every answer
//     of a batch call (checkBatch);
//   - joining concurrent acks, attempt starts and state writes into batch
//     calls (batch.go);
//   - redaction of URL secrets in open errors (url.go).

// broker is the portable wrapper of a driver.Broker, made by NewServer
// (OpenBroker returns the driver's own value). It implements driver.Broker
// itself, so the conformance kit (through internal/bridge) can call a
// Server's broker, layer and all, as a Broker.
type broker struct {
	drv    driver.Broker
	can    brokerAbilities // drv's optional interfaces
	limits driver.Limits
	acks   *coalesce.Coalescer[*driver.Delivery, struct{}] // concurrent acks, per queue (batch.go)

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ driver.Broker = (*broker)(nil)

// asBroker returns b's portable wrapper: b itself when it is one. Each
// Server wraps its driver once; two Servers on one driver value each have
// their own wrapper (closing one closes the driver, and the driver's own
// error answers the other).
func asBroker(b driver.Broker) *broker {
	if pb, ok := b.(*broker); ok {
		return pb
	}
	pb := &broker{drv: b, can: discoverBroker(b)}
	if pb.can.limiter != nil {
		pb.limits = pb.can.limiter.Limits()
	}
	pb.acks = pb.newAckCoalescer()
	return pb
}

// before is the check every call makes first.
func (b *broker) before(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// after maps a driver error: ErrClosed once the broker is closed, and the
// ctx's error when it ended during the call.
func (b *broker) after(ctx context.Context, err error) error {
	return mapErr(ctx, &b.closed, err)
}

func mapErr(ctx context.Context, closed *atomic.Bool, err error) error {
	switch {
	case err == nil:
		return nil
	case closed.Load() && !errors.Is(err, ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// checkPayload refuses a message larger than the broker takes; name says
// whose message it is in the error.
func (b *broker) checkPayload(m driver.Message, name string) error {
	if lim := b.limits.MaxPayload; lim > 0 && len(m.Body) > lim {
		return tooLarge(name, len(m.Body), lim)
	}
	return nil
}

// tooLarge is the error of a message of size bytes, of the task name,
// over a broker's limit: package errand's *PayloadError, which the
// portable layer cannot name (errand sets it), else an error wrapping
// driver.ErrPayloadTooLarge.
var tooLarge = func(name string, size, limit int) error {
	return fmt.Errorf("errand: task %q: encoded message is %d bytes, broker limit is %d bytes: %w", name, size, limit, driver.ErrPayloadTooLarge)
}

func (b *broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := b.checkPayload(m, m.ID); err != nil {
			return err
		}
	}
	return b.after(ctx, b.drv.Publish(ctx, msgs...))
}

func (b *broker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	if err := b.before(ctx); err != nil {
		return nil, err
	}
	ds, err := b.drv.Fetch(ctx, queue, max(limit, 1), lease)
	return ds, b.after(ctx, err)
}

// Ack acks ds (all from one queue) in one call of the driver, and
// answers one error per delivery (driver/doc.go's convention, checked).
func (b *broker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if err := b.before(ctx); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return mapBatch(ctx, b.after, checkBatch(b.drv, "Ack", len(ds), b.drv.Ack(ctx, ds)))
}

// ack acks d, in one Ack call with the acks of d's queue that concurrent
// callers make (batch.go).
func (b *broker) ack(ctx context.Context, d *driver.Delivery) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	_, err := b.acks.Do(ctx, d.Queue, d)
	return b.after(ctx, err)
}

func (b *broker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	return b.after(ctx, b.drv.Release(ctx, d, notBefore))
}

func (b *broker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	return b.after(ctx, b.drv.Extend(ctx, d, lease))
}

func (b *broker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	return b.after(ctx, b.drv.Reject(ctx, d, reason))
}

// Close closes the driver once; every later call returns ErrClosed.
func (b *broker) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.acks.Close()
		b.closeErr = b.drv.Close()
	})
	return b.closeErr
}

// backend is the portable wrapper of a driver.Backend. It implements
// driver.Backend itself.
type backend struct {
	drv driver.Backend
	// drv's optional interfaces, nil where it lacks one.
	waiter  driver.StateWaiter   // wakes waiters
	starter driver.Starter       // begins attempts in one call (start.go)
	pending driver.PendingWriter // writes PENDING only where absent
	expirer driver.Expirer       // its results expire

	// Concurrent calls joined into batch calls (batch.go).
	states *coalesce.Coalescer[*TaskState, struct{}]
	starts *coalesce.Coalescer[driver.StartRequest, driver.StartResult] // nil unless starter

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ driver.Backend = (*backend)(nil)

// asBackend returns b's portable wrapper: b itself when it is one.
func asBackend(b driver.Backend) *backend {
	if pb, ok := b.(*backend); ok {
		return pb
	}
	pb := &backend{drv: b}
	discoverBackend(pb)
	pb.states = pb.newStateCoalescer()
	if pb.starter != nil {
		pb.starts = pb.newStartCoalescer()
	}
	return pb
}

func (b *backend) before(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

func (b *backend) after(ctx context.Context, err error) error { return mapErr(ctx, &b.closed, err) }

// SetStates writes sts in one call of the driver, and answers one error
// per state (driver/doc.go's convention, checked).
func (b *backend) SetStates(ctx context.Context, sts []*TaskState) []error {
	if err := b.before(ctx); err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	return mapBatch(ctx, b.after, checkBatch(b.drv, "SetStates", len(sts), b.drv.SetStates(ctx, sts)))
}

// setState writes st, in one SetStates call with the states concurrent
// callers write (batch.go).
func (b *backend) setState(ctx context.Context, st *TaskState) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	_, err := b.states.Do(ctx, "", st)
	return b.after(ctx, err)
}

// setStates writes sts, in order, in one SetStates call, and returns the
// first state's error, naming its task, when any failed.
func (b *backend) setStates(ctx context.Context, sts []*TaskState) error {
	for i, err := range b.SetStates(ctx, sts) {
		if err != nil {
			return fmt.Errorf("task %s: set %s: %w", sts[i].TaskUUID, sts[i].State, err)
		}
	}
	return nil
}

func (b *backend) GetState(ctx context.Context, taskUUID string) (*TaskState, error) {
	if err := b.before(ctx); err != nil {
		return nil, err
	}
	st, err := b.drv.GetState(ctx, taskUUID)
	return st, b.after(ctx, err)
}

func (b *backend) InitGroup(ctx context.Context, groupUUID string, taskUUIDs []string) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	return b.after(ctx, b.drv.InitGroup(ctx, groupUUID, taskUUIDs))
}

func (b *backend) CompleteGroupMember(ctx context.Context, groupUUID, taskUUID string) (int, int, error) {
	if err := b.before(ctx); err != nil {
		return 0, 0, err
	}
	done, total, err := b.drv.CompleteGroupMember(ctx, groupUUID, taskUUID)
	return done, total, b.after(ctx, err)
}

func (b *backend) ClaimChord(ctx context.Context, groupUUID, claimer string) (bool, error) {
	if err := b.before(ctx); err != nil {
		return false, err
	}
	won, err := b.drv.ClaimChord(ctx, groupUUID, claimer)
	return won, b.after(ctx, err)
}

func (b *backend) GroupStates(ctx context.Context, groupUUID string) ([]*TaskState, error) {
	if err := b.before(ctx); err != nil {
		return nil, err
	}
	sts, err := b.drv.GroupStates(ctx, groupUUID)
	return sts, b.after(ctx, err)
}

// waitState blocks until the task's state satisfies done: woken by the
// driver where it can (driver.StateWaiter), else polling with a backoff
// from 2ms to 200ms. It returns ErrTaskNotFound for an unknown or expired
// task and ctx.Err() when ctx is done.
func (b *backend) waitState(ctx context.Context, id string, done func(*TaskState) bool) (*TaskState, error) {
	if err := b.before(ctx); err != nil {
		return nil, err
	}
	if b.waiter != nil {
		st, err := b.waiter.WaitState(ctx, id, done)
		return st, b.after(ctx, err)
	}
	delay := 2 * time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
		st, err := b.GetState(ctx, id)
		if err != nil {
			return nil, err
		}
		if done(st) {
			return st, nil
		}
		timer.Reset(delay)
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// Close closes the driver once; every later call returns ErrClosed.
func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.states.Close()
		if b.starts != nil {
			b.starts.Close()
		}
		b.closeErr = b.drv.Close()
	})
	return b.closeErr
}

// Limits reports the driver's declared limits (zero when it declares none).
func (b *broker) Limits() driver.Limits { return b.limits }

// ResultExpiry reports how long the driver keeps results (driver.Expirer),
// or 0 when its results do not expire.
func (b *backend) ResultExpiry() time.Duration {
	if b.expirer != nil {
		return b.expirer.ResultExpiry()
	}
	return 0
}

// start begins the attempt of req (driver.Starter), in one Start call
// with the requests of concurrent callers (batch.go), and checks the
// driver's answer.
func (b *backend) start(ctx context.Context, req driver.StartRequest) (driver.StartResult, error) {
	if err := b.before(ctx); err != nil {
		return driver.StartResult{}, err
	}
	res, err := b.starts.Do(ctx, "", req)
	return res, b.after(ctx, err)
}

// setPendingIfAbsent records st (PENDING) where its task has no state
// (driver.PendingWriter).
func (b *backend) setPendingIfAbsent(ctx context.Context, st *TaskState) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	errs := checkBatch(b.drv, "SetPendingIfAbsent", 1, b.pending.SetPendingIfAbsent(ctx, []*TaskState{st}))
	if errs == nil {
		return nil
	}
	return b.after(ctx, errs[0])
}

// unlock frees unique key key if task id holds it (driver.Uniquer).
func (b *broker) unlock(ctx context.Context, key, id string) error {
	return useErr(ctx, b, "unique tasks", func(u driver.Uniquer) error {
		return u.Unlock(ctx, key, id)
	})
}

// archive archives d through a, with e and keep, under the portable
// layer's checks.
func (b *broker) archive(ctx context.Context, a driver.Archiver, d *driver.Delivery, e driver.ArchiveEntry, keep Retention) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	return b.after(ctx, a.Archive(ctx, d, e, keep))
}

// scheduleStore returns b as a driver.ScheduleStore, in the portable
// layer (closed and ctx checks as for every other call). It returns an
// error satisfying errors.Is(err, errors.ErrUnsupported) when the driver
// keeps no schedules.
func (b *broker) scheduleStore() (driver.ScheduleStore, error) {
	st := b.can.schedules
	if st == nil {
		return nil, unsupported("schedules", b.drv)
	}
	return &scheduleStore{pb: b, st: st}, nil
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

// Package portable is errand's portable layer: every driver errand uses is
// wrapped in a *Broker or a *Backend, which own what each driver would
// otherwise repeat:
//
//   - closed checks: after Close every call returns driver.ErrClosed
//     without reaching the driver, and Close reaches the driver once;
//   - ctx checks: a call whose ctx is already done returns ctx.Err()
//     without reaching the driver, and an error returned while ctx is done
//     satisfies errors.Is(err, ctx.Err()) whatever the driver wrapped;
//   - the driver's optional capabilities, discovered once when it is
//     wrapped (capabilities.go) and each called through Use, which makes
//     both checks;
//   - payload limits, checked against the driver's Limits before anything
//     of a batch is sent;
//   - the batch error convention of driver/doc.go, checked on every answer
//     of a batch call (CheckBatch);
//   - joining concurrent acks, attempt starts and state writes into batch
//     calls (batch.go).
//
// Nothing here knows errand's Signature: the engine (package errand)
// encodes, decodes and decides; this package calls the drivers. The
// redaction of URL secrets in open errors, also the layer's, is in the
// root's url.go, beside OpenBroker.
package portable

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

// Broker is the portable wrapper of a driver.Broker, made by
// errand.NewServer (errand.OpenBroker returns the driver's own value). It
// implements driver.Broker itself, so the conformance kit (through
// internal/bridge) can call a Server's broker, layer and all, as a Broker.
type Broker struct {
	Drv    driver.Broker
	Can    Capabilities // Drv's optional interfaces
	limits driver.Limits
	Acks   *coalesce.Coalescer[*driver.Delivery, struct{}] // concurrent acks, per queue (batch.go)

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ driver.Broker = (*Broker)(nil)

// WrapBroker returns b's portable wrapper: b itself when it is one. Each
// Server wraps its driver once; two Servers on one driver value each have
// their own wrapper (closing one closes the driver, and the driver's own
// error answers the other).
func WrapBroker(b driver.Broker) *Broker {
	if pb, ok := b.(*Broker); ok {
		return pb
	}
	pb := &Broker{Drv: b, Can: discoverBroker(b)}
	if pb.Can.Limiter != nil {
		pb.limits = pb.Can.Limiter.Limits()
	}
	pb.Acks = pb.newAckCoalescer()
	return pb
}

// Before is the check every call makes first.
func (b *Broker) Before(ctx context.Context) error {
	if b.closed.Load() {
		return driver.ErrClosed
	}
	return ctx.Err()
}

// After maps a driver error: driver.ErrClosed once the broker is closed, and the
// ctx's error when it ended during the call.
func (b *Broker) After(ctx context.Context, err error) error {
	return mapErr(ctx, &b.closed, err)
}

func mapErr(ctx context.Context, closed *atomic.Bool, err error) error {
	switch {
	case err == nil:
		return nil
	case closed.Load() && !errors.Is(err, driver.ErrClosed):
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// CheckPayload refuses a message larger than the broker takes; name says
// whose message it is in the error.
func (b *Broker) CheckPayload(m driver.Message, name string) error {
	if lim := b.limits.MaxPayload; lim > 0 && len(m.Body) > lim {
		return TooLarge(name, len(m.Body), lim)
	}
	return nil
}

// TooLarge is the error of a message of size bytes, of the task name,
// over a broker's limit: package errand's *PayloadError, which the
// portable layer cannot name (errand sets it), else an error wrapping
// driver.ErrPayloadTooLarge.
var TooLarge = func(name string, size, limit int) error {
	return fmt.Errorf("errand: task %q: encoded message is %d bytes, broker limit is %d bytes: %w", name, size, limit, driver.ErrPayloadTooLarge)
}

func (b *Broker) Publish(ctx context.Context, msgs ...driver.Message) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	for _, m := range msgs {
		if err := b.CheckPayload(m, m.ID); err != nil {
			return err
		}
	}
	return b.After(ctx, b.Drv.Publish(ctx, msgs...))
}

func (b *Broker) Fetch(ctx context.Context, queue string, limit int, lease time.Duration) ([]*driver.Delivery, error) {
	if err := b.Before(ctx); err != nil {
		return nil, err
	}
	ds, err := b.Drv.Fetch(ctx, queue, max(limit, 1), lease)
	return ds, b.After(ctx, err)
}

// Ack acks ds (all from one queue) in one call of the driver, and
// answers one error per delivery (driver/doc.go's convention, checked).
func (b *Broker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if err := b.Before(ctx); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return mapBatch(ctx, b.After, CheckBatch(b.Drv, "Ack", len(ds), b.Drv.Ack(ctx, ds)))
}

// AckOne acks d, in one Ack call with the acks of d's queue that concurrent
// callers make (batch.go).
func (b *Broker) AckOne(ctx context.Context, d *driver.Delivery) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	_, err := b.Acks.Do(ctx, d.Queue, d)
	return b.After(ctx, err)
}

func (b *Broker) Release(ctx context.Context, d *driver.Delivery, notBefore time.Time) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, b.Drv.Release(ctx, d, notBefore))
}

func (b *Broker) Extend(ctx context.Context, d *driver.Delivery, lease time.Duration) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, b.Drv.Extend(ctx, d, lease))
}

func (b *Broker) Reject(ctx context.Context, d *driver.Delivery, reason string) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, b.Drv.Reject(ctx, d, reason))
}

// Close closes the driver once; every later call returns driver.ErrClosed.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.Acks.Close()
		b.closeErr = b.Drv.Close()
	})
	return b.closeErr
}

// Backend is the portable wrapper of a driver.Backend. It implements
// driver.Backend itself.
type Backend struct {
	Drv driver.Backend
	// Drv's optional interfaces, nil where it lacks one.
	waiter  driver.StateWaiter   // wakes waiters
	Starter driver.Starter       // begins attempts in one call (StartAttempt)
	Pending driver.PendingWriter // writes PENDING only where absent
	expirer driver.Expirer       // its results expire
	// Transactor writes inside a caller's transaction (driver.Transactor).
	Transactor driver.Transactor
	// Canceller records cancels atomically (driver.Canceller); nil: Cancel
	// takes the portable path.
	Canceller driver.Canceller

	// Concurrent calls joined into batch calls (batch.go).
	states *coalesce.Coalescer[*driver.TaskState, struct{}]
	starts *coalesce.Coalescer[driver.StartRequest, driver.StartResult] // nil unless starter

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ driver.Backend = (*Backend)(nil)

// WrapBackend returns b's portable wrapper: b itself when it is one.
func WrapBackend(b driver.Backend) *Backend {
	if pb, ok := b.(*Backend); ok {
		return pb
	}
	pb := &Backend{Drv: b}
	discoverBackend(pb)
	pb.states = pb.newStateCoalescer()
	if pb.Starter != nil {
		pb.starts = pb.newStartCoalescer()
	}
	return pb
}

func (b *Backend) Before(ctx context.Context) error {
	if b.closed.Load() {
		return driver.ErrClosed
	}
	return ctx.Err()
}

func (b *Backend) After(ctx context.Context, err error) error { return mapErr(ctx, &b.closed, err) }

// SetStates writes sts in one call of the driver, and answers one error
// per state (driver/doc.go's convention, checked).
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	if err := b.Before(ctx); err != nil {
		return driver.BatchErrors(len(sts), err)
	}
	return mapBatch(ctx, b.After, CheckBatch(b.Drv, "SetStates", len(sts), b.Drv.SetStates(ctx, sts)))
}

// SetState writes st, in one SetStates call with the states concurrent
// callers write (batch.go).
func (b *Backend) SetState(ctx context.Context, st *driver.TaskState) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	_, err := b.states.Do(ctx, "", st)
	return b.After(ctx, err)
}

// SetAll writes sts, in order, in one SetStates call, and returns the
// first state's error, naming its task, when any failed.
func (b *Backend) SetAll(ctx context.Context, sts []*driver.TaskState) error {
	for i, err := range b.SetStates(ctx, sts) {
		if err != nil {
			return fmt.Errorf("task %s: set %s: %w", sts[i].TaskUUID, sts[i].State, err)
		}
	}
	return nil
}

func (b *Backend) GetState(ctx context.Context, taskUUID string) (*driver.TaskState, error) {
	if err := b.Before(ctx); err != nil {
		return nil, err
	}
	st, err := b.Drv.GetState(ctx, taskUUID)
	return st, b.After(ctx, err)
}

func (b *Backend) InitGroup(ctx context.Context, groupUUID string, taskUUIDs []string) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, b.Drv.InitGroup(ctx, groupUUID, taskUUIDs))
}

func (b *Backend) CompleteGroupMember(ctx context.Context, groupUUID, taskUUID string) (int, int, error) {
	if err := b.Before(ctx); err != nil {
		return 0, 0, err
	}
	done, total, err := b.Drv.CompleteGroupMember(ctx, groupUUID, taskUUID)
	return done, total, b.After(ctx, err)
}

func (b *Backend) ClaimChord(ctx context.Context, groupUUID, claimer string) (bool, error) {
	if err := b.Before(ctx); err != nil {
		return false, err
	}
	won, err := b.Drv.ClaimChord(ctx, groupUUID, claimer)
	return won, b.After(ctx, err)
}

func (b *Backend) GroupStates(ctx context.Context, groupUUID string) ([]*driver.TaskState, error) {
	if err := b.Before(ctx); err != nil {
		return nil, err
	}
	sts, err := b.Drv.GroupStates(ctx, groupUUID)
	return sts, b.After(ctx, err)
}

// AwaitState blocks until the task's state satisfies done: woken by the
// driver where it can (driver.StateWaiter), else polling with a backoff
// from 2ms to 200ms. It returns ErrTaskNotFound for an unknown or expired
// task and ctx.Err() when ctx is done.
func (b *Backend) AwaitState(ctx context.Context, id string, done func(*driver.TaskState) bool) (*driver.TaskState, error) {
	if err := b.Before(ctx); err != nil {
		return nil, err
	}
	if b.waiter != nil {
		st, err := b.waiter.WaitState(ctx, id, done)
		return st, b.After(ctx, err)
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

// Close closes the driver once; every later call returns driver.ErrClosed.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.states.Close()
		if b.starts != nil {
			b.starts.Close()
		}
		b.closeErr = b.Drv.Close()
	})
	return b.closeErr
}

// Limits reports the driver's declared limits (zero when it declares none).
func (b *Broker) Limits() driver.Limits { return b.limits }

// ResultExpiry reports how long the driver keeps results (driver.Expirer),
// or 0 when its results do not expire.
func (b *Backend) ResultExpiry() time.Duration {
	if b.expirer != nil {
		return b.expirer.ResultExpiry()
	}
	return 0
}

// StartAttempt begins the attempt of req (driver.Starter), in one Start call
// with the requests of concurrent callers (batch.go), and checks the
// driver's answer.
func (b *Backend) StartAttempt(ctx context.Context, req driver.StartRequest) (driver.StartResult, error) {
	if err := b.Before(ctx); err != nil {
		return driver.StartResult{}, err
	}
	res, err := b.starts.Do(ctx, "", req)
	return res, b.After(ctx, err)
}

// SetPending records st (PENDING) where its task has no state
// (driver.PendingWriter).
func (b *Backend) SetPending(ctx context.Context, st *driver.TaskState) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	errs := CheckBatch(b.Drv, "SetPendingIfAbsent", 1, b.Pending.SetPendingIfAbsent(ctx, []*driver.TaskState{st}))
	if errs == nil {
		return nil
	}
	return b.After(ctx, errs[0])
}

// UnlockUnique frees unique key key if task id holds it (driver.Uniquer).
func (b *Broker) UnlockUnique(ctx context.Context, key, id string) error {
	return UseErr(ctx, b, "unique tasks", func(u driver.Uniquer) error {
		return u.Unlock(ctx, key, id)
	})
}

// ArchiveVia archives d through a, with e and keep, under the portable
// layer's checks.
func (b *Broker) ArchiveVia(ctx context.Context, a driver.Archiver, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	if err := b.Before(ctx); err != nil {
		return err
	}
	return b.After(ctx, a.Archive(ctx, d, e, keep))
}

// ScheduleStore returns b as a driver.ScheduleStore, in the portable
// layer (closed and ctx checks as for every other call). It returns an
// error satisfying errors.Is(err, errors.ErrUnsupported) when the driver
// keeps no schedules.
func (b *Broker) ScheduleStore() (driver.ScheduleStore, error) {
	st := b.Can.Schedules
	if st == nil {
		return nil, Unsupported("schedules", b.Drv)
	}
	return &scheduleStore{pb: b, st: st}, nil
}

// scheduleStore is a driver.ScheduleStore in the portable layer.
type scheduleStore struct {
	pb *Broker
	st driver.ScheduleStore
}

func (s *scheduleStore) PutSchedule(ctx context.Context, id string, data []byte) error {
	if err := s.pb.Before(ctx); err != nil {
		return err
	}
	return s.pb.After(ctx, s.st.PutSchedule(ctx, id, data))
}

func (s *scheduleStore) DeleteSchedule(ctx context.Context, id string) error {
	if err := s.pb.Before(ctx); err != nil {
		return err
	}
	return s.pb.After(ctx, s.st.DeleteSchedule(ctx, id))
}

func (s *scheduleStore) Schedules(ctx context.Context) (map[string][]byte, error) {
	if err := s.pb.Before(ctx); err != nil {
		return nil, err
	}
	m, err := s.st.Schedules(ctx)
	return m, s.pb.After(ctx, err)
}

func (s *scheduleStore) ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error) {
	if err := s.pb.Before(ctx); err != nil {
		return false, err
	}
	ok, err := s.st.ClaimTick(ctx, id, tick)
	if err != nil {
		return false, s.pb.After(ctx, err)
	}
	return ok, nil
}

func (s *scheduleStore) LastTick(ctx context.Context, id string) (time.Time, error) {
	if err := s.pb.Before(ctx); err != nil {
		return time.Time{}, err
	}
	t, err := s.st.LastTick(ctx, id)
	return t, s.pb.After(ctx, err)
}

package errand

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand/driver"
)

// The portable layer: every driver errand uses is wrapped in a *broker or a
// *backend, which own what each driver would otherwise repeat:
//
//   - closed checks: after Close every call returns ErrClosed without
//     reaching the driver, and Close reaches the driver once;
//   - ctx checks: a call whose ctx is already done returns ctx.Err() without
//     reaching the driver, and an error returned while ctx is done satisfies
//     errors.Is(err, ctx.Err()) whatever the driver wrapped;
//   - payload limits, checked against the driver's Limits before anything
//     of a batch is sent;
//   - batching of concurrent acks, attempt starts and state writes where
//     the driver takes batches (batch.go);
//   - redaction of URL secrets in open errors (url.go).

// broker is the portable wrapper of a driver.Broker. It implements
// driver.Broker itself, so OpenBroker can return it as a Broker.
type broker struct {
	drv    driver.Broker
	limits driver.Limits
	acks   *coalescer[*driver.Delivery, struct{}] // nil unless drv is a driver.BatchAcker

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      context.CancelFunc // ends background ack flushes on Close
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
	pb := &broker{drv: b}
	if l, ok := b.(driver.Limiter); ok {
		pb.limits = l.Limits()
	}
	if ba, ok := b.(driver.BatchAcker); ok {
		var ctx context.Context
		ctx, pb.stop = context.WithCancel(context.Background())
		pb.acks = newAckCoalescer(ctx, ba, pb.limits.MaxAckBatch)
	}
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
		return &PayloadError{TaskName: name, Size: len(m.Body), Limit: lim}
	}
	return nil
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

func (b *broker) Ack(ctx context.Context, d *driver.Delivery) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	if b.acks != nil {
		_, err := b.acks.do(ctx, d.Queue, d)
		return b.after(ctx, err)
	}
	return b.after(ctx, b.drv.Ack(ctx, d))
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
		if b.stop != nil {
			b.stop()
		}
		b.closeErr = b.drv.Close()
	})
	return b.closeErr
}

// backend is the portable wrapper of a driver.Backend.
type backend struct {
	drv     driver.Backend
	batcher driver.StateBatcher  // nil unless drv batches writes
	waiter  driver.StateWaiter   // nil unless drv wakes waiters
	starter driver.Starter       // nil unless drv begins attempts in one call (start.go)
	pending driver.PendingWriter // nil unless drv writes PENDING only where absent

	// Concurrent calls joined into batch calls (batch.go).
	states *coalescer[*TaskState, struct{}]                    // nil unless batcher
	starts *coalescer[driver.StartRequest, driver.StartResult] // nil unless starter

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      context.CancelFunc // ends batch calls in flight on Close
}

var (
	_ driver.Backend      = (*backend)(nil)
	_ driver.StateBatcher = (*backend)(nil)
)

// asBackend returns b's portable wrapper: b itself when it is one.
func asBackend(b driver.Backend) *backend {
	if pb, ok := b.(*backend); ok {
		return pb
	}
	pb := &backend{drv: b}
	pb.batcher, _ = b.(driver.StateBatcher)
	pb.waiter, _ = b.(driver.StateWaiter)
	pb.starter, _ = b.(driver.Starter)
	pb.pending, _ = b.(driver.PendingWriter)
	var ctx context.Context
	ctx, pb.stop = context.WithCancel(context.Background())
	if pb.batcher != nil {
		pb.states = newStateCoalescer(ctx, b, pb.batcher)
	}
	if pb.starter != nil {
		pb.starts = pb.newStartCoalescer(ctx)
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

// SetState writes st; where the driver batches, in one SetStates call
// with the states concurrent callers write (batch.go).
func (b *backend) SetState(ctx context.Context, st *TaskState) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	if b.states != nil {
		_, err := b.states.do(ctx, "", st)
		return b.after(ctx, err)
	}
	return b.after(ctx, b.drv.SetState(ctx, st))
}

// SetStates writes sts in order: in one call where the driver batches,
// else one by one.
func (b *backend) SetStates(ctx context.Context, sts []*TaskState) error {
	if err := b.before(ctx); err != nil {
		return err
	}
	if b.batcher != nil {
		return b.after(ctx, b.batcher.SetStates(ctx, sts))
	}
	for _, st := range sts {
		if err := b.drv.SetState(ctx, st); err != nil {
			return b.after(ctx, err)
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
		b.stop()
		b.closeErr = b.drv.Close()
	})
	return b.closeErr
}

// Limits reports the driver's declared limits (zero when it declares none).
func (b *broker) Limits() driver.Limits { return b.limits }

// ResultExpiry reports how long the driver keeps results (driver.Expirer),
// or 0 when its results do not expire.
func (b *backend) ResultExpiry() time.Duration {
	if e, ok := b.drv.(driver.Expirer); ok {
		return e.ResultExpiry()
	}
	return 0
}

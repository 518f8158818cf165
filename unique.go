package errand

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// Unique tasks (Signature.UniqueKey): a producer takes the key on the
// broker's server before it records the task PENDING and publishes it; a
// second send of the key while it is held returns a *DuplicateError naming
// the task that holds it. The worker frees the key when the task ends for
// good (SUCCESS, or FAILURE with no retry left), never on a retry; the
// lock's ttl (UniqueFor) frees it if no worker ever does. See
// docs/flow-control.md.

// checkUnique refuses what errand cannot keep unique: a UniqueKey without
// a positive UniqueFor on head (the one signature of the send that may be
// unique; nil when none may be), and a UniqueKey on any other signature
// of the send — sigs and everything linked to head or to them (callbacks,
// a chain's later tasks, group members), which workers publish without a
// lock.
func checkUnique(what string, head *Signature, sigs ...*Signature) error {
	if head != nil && head.UniqueKey != "" && head.UniqueFor <= 0 {
		return fmt.Errorf("errand: %s: task %s has UniqueKey %q but no positive UniqueFor (how long the key may be held at most)", what, head.Name, head.UniqueKey)
	}
	var walk func(sig *Signature, linked bool) error
	walk = func(sig *Signature, linked bool) error {
		if sig == nil {
			return nil
		}
		if linked && sig.UniqueKey != "" {
			return fmt.Errorf("errand: %s: task %s has UniqueKey %q: only a task sent on its own (SendTask) or a chain's first task can be unique, not a group or chord member, a chain's later task or a callback", what, sig.Name, sig.UniqueKey)
		}
		for _, c := range sig.OnSuccess {
			if err := walk(c, true); err != nil {
				return err
			}
		}
		for _, c := range sig.OnError {
			if err := walk(c, true); err != nil {
				return err
			}
		}
		return walk(sig.ChordCallback, true)
	}
	if err := walk(head, false); err != nil {
		return err
	}
	for _, sig := range sigs {
		if err := walk(sig, true); err != nil {
			return err
		}
	}
	return nil
}

// unlockTimeout bounds the Unlock of a send that failed after taking its
// key (its own ctx may be what ended it).
const unlockTimeout = 10 * time.Second

// lockUnique takes sig's unique key for sig.UUID, if it has one, and
// returns the func that frees it again should the send fail. A key held
// by another task is a *DuplicateError; a broker that cannot hold keys
// (no driver.Uniquer) an error satisfying errors.ErrUnsupported.
func (s *Server) lockUnique(ctx context.Context, sig *Signature) (unlock func(), err error) {
	if sig.UniqueKey == "" {
		return func() {}, nil
	}
	if s.broker.Can.Uniquer == nil {
		return nil, fmt.Errorf("errand: send %s with UniqueKey %q: %w", sig.Name, sig.UniqueKey, portable.Unsupported("unique tasks", s.broker.Drv))
	}
	holder, err := portable.Use(ctx, s.broker, "unique tasks", func(u driver.Uniquer) (string, error) {
		return u.Lock(ctx, sig.UniqueKey, sig.UUID, sig.UniqueFor)
	})
	if err != nil {
		return nil, fmt.Errorf("errand: send %s: take unique key %q: %w", sig.Name, sig.UniqueKey, err)
	}
	if holder != sig.UUID {
		return nil, &DuplicateError{Key: sig.UniqueKey, ID: holder}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if err := s.broker.UnlockUnique(ctx, sig.UniqueKey, sig.UUID); err != nil {
			s.log.Warn("errand: a failed send could not free its unique key; it is held until UniqueFor runs out",
				"task", sig.Name, "uuid", sig.UUID, "unique_key", sig.UniqueKey, "unique_for", sig.UniqueFor, "err", err)
		}
	}, nil
}

// unlockUnique frees sig's unique key, if it has one and sig holds it:
// sig has ended for good. An error leaves the delivery to be settled
// again (the step is idempotent). A broker without driver.Uniquer holds
// no key this worker could free: logged, not an error.
func (w *Worker) unlockUnique(ctx context.Context, sig *Signature) error {
	if sig.UniqueKey == "" {
		return nil
	}
	if w.srv.broker.Can.Uniquer == nil {
		w.log.Warn("errand: task has a UniqueKey but this worker's broker holds no unique keys; nothing freed", taskAttrs(sig, sig.RoutingKey)...)
		return nil
	}
	if err := w.srv.broker.UnlockUnique(ctx, sig.UniqueKey, sig.UUID); err != nil {
		return fmt.Errorf("errand: task %s (%s): free unique key %q: %w", sig.Name, sig.UUID, sig.UniqueKey, err)
	}
	return nil
}

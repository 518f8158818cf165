package errand

import (
	"context"
	"fmt"
	"sync"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/coalesce"
)

// Fresh sends: SendTask under a UUID errand made itself, so that no state
// can exist under it yet. PENDING is then written only where absent, and
// needs not precede the publish:
//
//   - where the broker and the backend are co-located (Server.coloc,
//     colocation.go), the states and the messages go in one
//     Colocation.Send call, one trip, and concurrent sends to one queue
//     share calls (below);
//   - else, where the backend writes PENDING only where absent
//     (driver.PendingWriter), a SetPendingIfAbsent and a Publish go side
//     by side;
//   - else PENDING is written first, then the message published (the path
//     of every send under a UUID the caller chose).
//
// Co-located sends are joined per queue, as acks are
// (internal/portable/batch.go): a send finding sendFlights calls of its
// queue in flight joins the next, which carries
// every send of that queue queued meanwhile (up to Config.PublishBatch),
// so many producers' SendTask calls make one pipeline. One call holds the
// messages of one queue only, so a broker whose publish to one queue is
// all or nothing (as driver.Colocation.Send must be) reports a true outcome for every send
// of the call. A send taken into a call is answered by that call even if
// its caller gives up meanwhile: a send the call made is reported sent.

// sendFlights is how many Send calls of one queue may be in flight
// before concurrent SendTask calls to that queue join the next. Two, not
// four: fewer, larger calls cost less CPU per send (one transaction's
// fixed commands for more messages), which is the bound of ten producers
// on a small machine (docs/redis.md, "Round 4").
const sendFlights = 2

// freshSend is one SendTask's state and message.
type freshSend struct {
	st *TaskState
	m  Message
}

// newFreshSender returns the coalescer of fresh sends over s.coloc.calls.Send.
// Server.Close closes it.
func (s *Server) newFreshSender() *coalesce.Coalescer[freshSend, bool] {
	return coalesce.New(coalesce.Config[freshSend, bool]{
		Flights: sendFlights, Limit: s.cfg.PublishBatch, AnswerTaken: true, Closed: ErrClosed,
		Run: func(ctx context.Context, _ string, reqs []freshSend, published []bool, errs []error) {
			var sts []*TaskState
			var msgs []Message
			if len(reqs) == 1 { // the common call: one allocation for both
				one := new(struct {
					st [1]*TaskState
					m  [1]Message
				})
				sts, msgs = one.st[:], one.m[:]
			} else {
				sts, msgs = make([]*TaskState, len(reqs)), make([]Message, len(reqs))
			}
			for i, r := range reqs {
				sts[i], msgs[i] = r.st, r.m
			}
			ok, err := s.coloc.calls.Send(ctx, sts, msgs)
			err = s.broker.After(ctx, err)
			for i := range reqs {
				published[i], errs[i] = ok, err
			}
		},
	})
}

// pendingBesidePublish writes st with SetPendingIfAbsent while m is
// published. published says the broker took m (an error may then still
// come from the state).
func (s *Server) pendingBesidePublish(ctx context.Context, st *TaskState, m Message) (published bool, err error) {
	var pendErr error
	var wg sync.WaitGroup
	wg.Go(func() { pendErr = s.backend.SetPending(ctx, st) })
	pubErr := s.broker.Publish(ctx, m)
	wg.Wait()
	switch {
	case pubErr != nil:
		return false, pubErr
	case pendErr != nil:
		return true, fmt.Errorf("set PENDING (the task was published): %w", pendErr)
	}
	return true, nil
}

// setPendingAndPublish records sig's PENDING state and publishes m: with
// fresh (SendTask made sig's UUID) as a fresh send, above; otherwise
// PENDING first, then the publish. published says the broker took m (an
// error may still come from the PENDING write then). After a failed
// publish PENDING may remain, as it does on the sequential path.
func (s *Server) setPendingAndPublish(ctx context.Context, sig *Signature, m Message, fresh bool) (published bool, err error) {
	switch {
	case inTx(ctx):
		published, err = s.sendInTx(ctx, sig, m, fresh)
	case fresh && s.coloc != nil:
		if err = s.broker.Before(ctx); err == nil {
			err = s.backend.Before(ctx)
		}
		if err == nil {
			published, err = s.coloc.sends.Do(ctx, m.Queue, freshSend{pendingState(sig, stateTime()), m})
		}
	case fresh && s.backend.Pending != nil:
		published, err = s.pendingBesidePublish(ctx, pendingState(sig, stateTime()), m)
	default:
		if err := s.setPending(ctx, sig); err != nil {
			return false, fmt.Errorf("errand: send %s: set PENDING: %w", sig.Name, err)
		}
		err = s.broker.Publish(ctx, m)
		published = err == nil
	}
	if err != nil {
		return published, fmt.Errorf("errand: send %s: %w", sig.Name, err)
	}
	return true, nil
}

// sendInTx is setPendingAndPublish inside the caller's transaction
// (tx.go): one call at a time, joined with no other send. Where the
// broker and the backend are co-located and both write inside the
// transaction, a fresh send is one Colocation.Send call of its own; else
// PENDING is written first (where absent, for a fresh send to a
// PendingWriter; outside the transaction when the backend does not take
// it), then the message published inside the transaction.
func (s *Server) sendInTx(ctx context.Context, sig *Signature, m Message, fresh bool) (published bool, err error) {
	st := pendingState(sig, stateTime())
	if fresh && s.coloc != nil && s.backendTakes(driver.TxFrom(ctx)) {
		if err = s.broker.Before(ctx); err == nil {
			err = s.backend.Before(ctx)
		}
		if err != nil {
			return false, err
		}
		published, err = s.coloc.calls.Send(ctx, []*TaskState{st}, []Message{m})
		return published, s.broker.After(ctx, err)
	}
	sctx := s.stateCtx(ctx)
	if fresh && s.backend.Pending != nil {
		err = s.backend.SetPending(sctx, st)
	} else {
		err = s.backend.SetAll(sctx, []*TaskState{st})
	}
	if err != nil {
		return false, fmt.Errorf("set PENDING: %w", err)
	}
	if err = s.broker.Publish(ctx, m); err != nil {
		return false, err
	}
	return true, nil
}

package redisbroker

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

var _ driver.PendingCarrier = (*Broker)(nil)

// pendingSource is what CarryPending needs of a backend: the client it
// writes through, and its SetPendingIfAbsent commands queued on a pipeline
// without sending them. errand's Redis result backend
// (redisbackend.Backend) has both; the broker matches them by shape, so
// that neither driver module requires the other.
type pendingSource interface {
	Client() goredis.UniversalClient
	QueuePendingIfAbsent(ctx context.Context, pipe goredis.Pipeliner, sts []*driver.TaskState) error
}

// CarryPending returns a driver.PublishPendingFunc that records be's
// PENDING states in the pipeline of the publish, when be is errand's Redis
// backend on the broker's own server (redisconn.SameServer: the same
// client, or clients of equal address, DB and user, or of the same
// cluster); nil otherwise. It does no I/O.
//
// The function checks msgs as Publish does (nothing is sent if one is
// refused), then sends one pipeline: first the backend's SET ... NX PX of
// every state (PENDING only where a task has no state yet), then the
// SADD of the queues and one publish script per queue, exactly as
// Publish. That is one round trip on a single node (two on a server that
// has not cached the publish script yet: the refused scripts alone are
// sent again with their source; the SET NX would be harmless twice, but
// are not sent twice). On a Redis Cluster go-redis splits the pipeline by
// node: one round trip per node holding a state or a queue, in parallel.
// On one node the states go before the messages, so a worker never fetches
// a message whose PENDING is still to come; across nodes there is no such
// order, and none is needed (the backend writes PENDING only where
// absent).
//
// published is true when every publish script succeeded; the error then
// comes from the states alone (a state that cannot be encoded, or a SET
// that failed), and a failed SADD of the queue set is not reported: the
// messages are queued, and a worker's Fetch adds its queue to the set
// anyway.
func (b *Broker) CarryPending(be driver.Backend) driver.PublishPendingFunc {
	src, ok := be.(pendingSource)
	if !ok || !redisconn.SameServer(b.rdb, src.Client()) {
		return nil
	}
	return func(ctx context.Context, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
		return b.publishPending(ctx, src, sts, msgs)
	}
}

// publishPending is the function CarryPending returns for src.
func (b *Broker) publishPending(ctx context.Context, src pendingSource, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	batch, err := b.preparePublish(msgs)
	if err != nil {
		return false, err
	}
	var (
		encodeErr error          // a state that could not be encoded: none queued
		nStates   int            // the commands queued for sts, first in the pipeline
		scripts   []*goredis.Cmd // the publish scripts
	)
	cmds, err := b.pipelined(ctx, func(pipe goredis.Pipeliner, eval evalFunc) {
		encodeErr = src.QueuePendingIfAbsent(ctx, pipe, sts)
		nStates = pipe.Len()
		scripts = batch.queue(ctx, pipe, eval)
	})
	if err == nil {
		batch.relist(ctx, scripts)
		return true, encodeErr
	}
	if err := scriptsErr(scripts, err); err != nil {
		return false, b.err(ctx, err)
	}
	batch.relist(ctx, scripts)
	if encodeErr != nil {
		return true, encodeErr
	}
	for _, c := range cmds[:min(nStates, len(cmds))] {
		if e := c.Err(); e != nil && e != goredis.Nil {
			return true, b.err(ctx, fmt.Errorf("PENDING states: %w", e))
		}
	}
	return true, nil
}

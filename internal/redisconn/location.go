package redisconn

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/statejson"
)

// States is where errand's Redis result backend keeps its task states:
// the value its Location method returns (driver.Located). errand's Redis
// broker co-locates with a backend whose location is a *States on its own
// server (SameServer), writing and reading the states there itself in the
// step of a publish, a fetch or an ack (driver.Colocator). The type is in
// this module, which both Redis drivers import, so that neither requires
// the other and the backend exports nothing for the broker; no other
// driver can declare it.
//
// The layout is the backend's, read here by the broker: a task's state is
// one string key, StateKey(id), holding its JSON (errand's
// internal/statejson encoding), with Expiry as its PX (0: none).
type States struct {
	Client goredis.UniversalClient
	Prefix string        // a task's state key is Prefix + ":task:" + its UUID
	Expiry time.Duration // each state's expiry (0: none)
}

// StatePrefix is the part of every state key before the task's UUID.
func (s *States) StatePrefix() string { return s.Prefix + ":task:" }

// StateKey is the key of task id's state.
func (s *States) StateKey(id string) string { return s.Prefix + ":task:" + id }

// QueueStates queues on pipe one SET ... PX per state, at its key in this
// layout with its expiry (SET ... NX PX when nx: only where the task has
// no state). It encodes every state before it queues anything, so an
// encode error leaves pipe as it was. The backend's writes and the
// broker's co-located ones both go through it.
func (s *States) QueueStates(ctx context.Context, pipe goredis.Pipeliner, sts []*driver.TaskState, nx bool) error {
	vs := make([][]byte, len(sts))
	for i, st := range sts {
		v, err := statejson.Marshal(st)
		if err != nil {
			return fmt.Errorf("encode state of %s: %w", st.TaskUUID, err)
		}
		vs[i] = v
	}
	for i, st := range sts {
		if nx {
			pipe.SetNX(ctx, s.StateKey(st.TaskUUID), vs[i], s.Expiry)
		} else {
			pipe.Set(ctx, s.StateKey(st.TaskUUID), vs[i], s.Expiry)
		}
	}
	return nil
}

package redisbackend_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
)

// TestQueuePendingIfAbsent: the commands QueuePendingIfAbsent queues for
// errand's Redis broker are SetPendingIfAbsent's: sent in the caller's
// pipeline they write PENDING where a task has no state and leave a state
// already there; a state that cannot be encoded queues nothing.
func TestQueuePendingIfAbsent(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test-queue-pending", ResultExpiry: time.Minute})
			if b.Client() != rdb {
				t.Fatalf("Client() is not the client the backend was made with")
			}
			started := &errand.TaskState{TaskUUID: rand.Text(), TaskName: "t", State: errand.StateStarted, Attempt: 1, CreatedAt: time.Now()}
			if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{started})...); err != nil {
				t.Fatal(err)
			}
			fresh := &errand.TaskState{TaskUUID: rand.Text(), TaskName: "t", State: errand.StatePending, CreatedAt: time.Now()}
			pending := &errand.TaskState{TaskUUID: started.TaskUUID, TaskName: "t", State: errand.StatePending, CreatedAt: time.Now()}

			pipe := rdb.Pipeline()
			if err := b.QueuePendingIfAbsent(ctx, pipe, []*errand.TaskState{fresh, pending}); err != nil {
				t.Fatal(err)
			}
			if n := pipe.Len(); n != 2 {
				t.Fatalf("queued %d commands for 2 states; want one SET NX each", n)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if st, err := b.GetState(ctx, fresh.TaskUUID); err != nil || st.State != errand.StatePending {
				t.Fatalf("task with no state: %+v, %v; want PENDING written", st, err)
			}
			if st, err := b.GetState(ctx, started.TaskUUID); err != nil || st.State != errand.StateStarted {
				t.Fatalf("task already STARTED: %+v, %v; want STARTED left (PENDING only where absent)", st, err)
			}
			if ttl := rdb.PTTL(ctx, "errand-test-queue-pending:task:"+fresh.TaskUUID).Val(); ttl <= 0 || ttl > time.Minute {
				t.Fatalf("PENDING written with TTL %v; want the ResultExpiry of 1m", ttl)
			}

			bad := &errand.TaskState{TaskUUID: rand.Text(), State: errand.StatePending, Results: []errand.Result{{Type: "x", Value: json.RawMessage("{not json")}}}
			pipe = rdb.Pipeline()
			if err := b.QueuePendingIfAbsent(ctx, pipe, []*errand.TaskState{fresh, bad}); err == nil {
				t.Fatal("a state that cannot be encoded: no error")
			}
			if n := pipe.Len(); n != 0 {
				t.Fatalf("an encode error left %d commands queued; want none", n)
			}
		})
	}
}

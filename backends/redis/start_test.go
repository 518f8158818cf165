package redisbackend_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/driver"
)

// TestStartBatchAfterScriptFlush: a batch sent as a pipeline of EVALSHA
// to a server that lost its scripts (a restart, SCRIPT FLUSH) loads the
// script and still answers every request: Start's, then Cancel's and
// SetStates' (whose scripts that flush dropped too).
func TestStartBatchAfterScriptFlush(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test-flush"})
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			var reqs []driver.StartRequest
			for range 8 {
				st := &errand.TaskState{TaskUUID: rand.Text(), TaskName: "t", State: errand.StateReceived, Attempt: 1, CreatedAt: time.Now()}
				started := st.Copy()
				started.State = errand.StateStarted
				reqs = append(reqs, driver.StartRequest{Received: st, Started: started, FirstDelivery: true})
			}
			res := b.Start(ctx, reqs)
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("Start after SCRIPT FLUSH: request %d: %v", i, r.Err)
				}
				if !r.Written || r.Prev != nil {
					t.Fatalf("request %d: %+v; want written over no state", i, r)
				}
				if st, err := b.GetState(ctx, reqs[i].Started.TaskUUID); err != nil || st.State != errand.StateStarted {
					t.Fatalf("request %d: state %+v, %v; want STARTED", i, st, err)
				}
			}
			var cancels, late []*errand.TaskState
			for _, r := range reqs {
				cancels = append(cancels, cancelOf(r.Started.TaskUUID))
				done := r.Started.Copy()
				done.State = errand.StateSuccess
				late = append(late, done)
			}
			for i, r := range b.Cancel(ctx, cancels) {
				if r.Err != nil || !r.Written {
					t.Fatalf("Cancel after SCRIPT FLUSH: state %d: %+v; want written", i, r)
				}
			}
			errs := b.SetStates(ctx, late)
			for i := range late {
				if len(errs) != len(late) || !errors.Is(errs[i], errand.ErrCancelled) {
					t.Fatalf("SetStates after SCRIPT FLUSH of SUCCESS over cancels answered %v; want ErrCancelled for each", errs)
				}
			}
		})
	}
}

package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestCancelRecordedGroupOnRedis: on the Redis broker and backend (a
// single node and a cluster), a plain group sent with errand.RecordGroup
// is cancelled by its UUID from a second Server with drivers of its own,
// as another process's: every member in group order, the running one
// cancelled while it ran, the two queued before they started, none run
// after. A group sent without it keeps no record: its UUID stays unknown.
func TestCancelRecordedGroupOnRedis(t *testing.T) {
	t.Parallel()
	for name, c := range redisDeployments(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cancelRecordedGroup(t, c.rdb)
		})
	}
}

func cancelRecordedGroup(t *testing.T, rdb goredis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("errand-e2e-recgroup-%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(rdb, prefix) })
	server := func() *errand.Server {
		srv, err := errand.NewServer(errand.Config{
			Broker:       redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix}),
			Backend:      redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix}),
			DefaultQueue: "q",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	producer, operator := server(), server()
	ran := make(chan string, 8)
	if err := producer.Register("hold", func(ctx context.Context) error {
		info, _ := errand.TaskInfoFrom(ctx)
		ran <- info.UUID
		<-ctx.Done()
		return context.Cause(ctx)
	}); err != nil {
		t.Fatal(err)
	}

	plain, _ := errand.NewGroup(errand.NewSignature("hold"), errand.NewSignature("hold"))
	for _, sig := range plain.Tasks {
		sig.RoutingKey = "idle" // no worker takes them
	}
	if _, err := producer.SendGroup(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if rep, err := operator.Cancel(ctx, plain.GroupUUID); err != nil || rep.Outcome != errand.CancelUnknown || rep.Group {
		t.Fatalf("Cancel(a plain group's UUID) = %+v, %v; want unknown: SendGroup without RecordGroup records no group", rep, err)
	}

	g, _ := errand.NewGroup(errand.NewSignature("hold"), errand.NewSignature("hold"), errand.NewSignature("hold"))
	rs, err := producer.SendGroup(ctx, g, errand.RecordGroup())
	if err != nil {
		t.Fatal(err)
	}
	w := producer.NewWorker(errand.WorkerConfig{Concurrency: 1})
	w.Start()
	defer func() { // on a failure, the held task is not waited for
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		w.Shutdown(sctx)
	}()
	var first string
	select {
	case first = <-ran:
	case <-ctx.Done():
		t.Fatal("no member of the group ever ran")
	}
	rep, err := operator.Cancel(ctx, g.GroupUUID)
	if err != nil || !rep.Group || rep.Outcome != errand.CancelRunning || len(rep.Tasks) != 3 {
		t.Fatalf("Cancel(a recorded group's UUID) from a second Server = %+v, %v; want Group, outcome running, its 3 members", rep, err)
	}
	for i, tc := range rep.Tasks {
		want := errand.TaskCancel{UUID: g.Tasks[i].UUID, Name: "hold", Outcome: errand.CancelQueued, Prev: errand.StatePending}
		if tc.UUID == first {
			want.Outcome, want.Prev = errand.CancelRunning, errand.StateStarted
		}
		if tc != want {
			t.Errorf("Cancel(group) task %d = %+v; want %+v (members in group order, the running one running, the others queued)", i, tc, want)
		}
	}
	for i, r := range rs {
		if _, err := r.Get(ctx); !errors.Is(err, errand.ErrCancelled) {
			t.Errorf("member %d of the cancelled group: Get = %v; want ErrCancelled", i, err)
		}
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 0 {
		t.Errorf("a member ran after its group was cancelled (%s); only %s, running then, ever ran", <-ran, first)
	}
}

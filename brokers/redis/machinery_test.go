package redisbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

func machineryHarness(rdb goredis.UniversalClient) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			// Each case its own delayed set (machinery has one per
			// deployment, shared by every queue).
			b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{
				Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), PollInterval: 20 * time.Millisecond})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps:   conformance.BrokerCaps{OrderedByETA: true, DetectsLostLease: true, Durable: true},
		Timing: conformance.Timing{Lease: 300 * time.Millisecond, Delay: 300 * time.Millisecond, DelayBound: 150 * time.Millisecond},
		// Foreign bytes go where machinery's producer puts a task: RPUSH
		// onto the list named after the queue.
		PushRaw: func(t testing.TB, _ errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			if err := rdb.RPush(context.Background(), queue, raw).Err(); err != nil {
				t.Fatalf("PushRaw: RPUSH onto machinery's list: %v", err)
			}
			return true
		},
	}
}

// TestMachineryConformance runs the kit's broker and worker cases on the
// broker on machinery's queues.
func TestMachineryConformance(t *testing.T) {
	rdb := singleServer(t)
	conformance.RunBroker(t, machineryHarness(rdb))
	conformance.RunWorker(t, machineryHarness(rdb), conformance.MemoryBackend())
}

// TestMachineryLeaseReturnsToMachineryList: a task errand fetched and
// never settled (its worker died) goes back to the head of machinery's
// list when its lease runs out, where machinery's BLPOP would find it, and
// the next fetch delivers it with its delivery count; the stale lease can
// no longer settle it.
func TestMachineryLeaseReturnsToMachineryList(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q := "mq-" + rand.Text()
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), PollInterval: 10 * time.Millisecond})
	defer b.Close()
	body := `{"UUID":"task_1","Name":"add","RoutingKey":"` + q + `","Args":[]}`
	if err := rdb.RPush(ctx, q, body).Err(); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Fetch(ctx, q, 1, 50*time.Millisecond)
	if err != nil || len(ds) != 1 || ds[0].ID != "task_1" || ds[0].Attempt != 1 {
		t.Fatalf("first fetch: %v, %v; want task_1, delivery 1", ds, err)
	}
	if n := rdb.LLen(ctx, q).Val(); n != 0 {
		t.Fatalf("machinery's list holds %d after errand took its task, want 0 (the task is leased)", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	var again []*driver.Delivery
	for time.Now().Before(deadline) && len(again) == 0 {
		fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		again, _ = b.Fetch(fctx, q, 1, time.Minute)
		cancel()
	}
	if len(again) != 1 || again[0].ID != "task_1" || again[0].Attempt != 2 {
		t.Fatalf("after the lease ran out: %v, want task_1 delivered again (delivery 2): at-least-once from the moment errand takes a task", again)
	}
	if errs := b.Ack(ctx, ds); len(errs) != 1 || !errors.Is(errs[0], driver.ErrLeaseLost) {
		t.Errorf("ack of the stale lease: %v, want ErrLeaseLost", errs)
	}
	if errs := b.Ack(ctx, again); errs != nil && errs[0] != nil {
		t.Errorf("ack of the live lease: %v", errs)
	}
}

// TestMachineryPublishFormat: what errand publishes lands where machinery's
// producer would put it: RPUSH onto the queue's list, or ZADD into the
// delayed set scored by the ETA in Unix nanoseconds, with RoutingKey set.
func TestMachineryPublishFormat(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q, delayed := "mq-"+rand.Text(), "errand-mtest-delayed-"+rand.Text()
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: delayed})
	defer b.Close()
	defer rdb.Del(ctx, q, delayed)
	eta := time.Now().Add(time.Hour)
	err := b.Publish(ctx,
		errand.Message{ID: "now", Queue: q, Body: []byte(`{"UUID":"now","Name":"t","RoutingKey":""}`)},
		errand.Message{ID: "later", Queue: q, Body: []byte(`{"UUID":"later","Name":"t","RoutingKey":""}`), NotBefore: eta})
	if err != nil {
		t.Fatal(err)
	}
	got := rdb.LRange(ctx, q, 0, -1).Val()
	if len(got) != 1 || got[0] != `{"Name":"t","RoutingKey":"`+q+`","UUID":"now"}` {
		t.Errorf("machinery's list holds %q, want the task with its RoutingKey", got)
	}
	zs := rdb.ZRangeWithScores(ctx, delayed, 0, -1).Val()
	if len(zs) != 1 || int64(zs[0].Score)/1e6 != eta.UnixNano()/1e6 {
		t.Errorf("machinery's delayed set holds %v, want the delayed task scored %d ns", zs, eta.UnixNano())
	}
}

// TestMachineryWorkerKilled: a worker process killed mid-task (SIGKILL: no
// ack, no release) on machinery's queue loses nothing: its tasks go back
// onto machinery's list when their leases run out and a second worker
// completes every one (see conformance.RunWorkerKilled).
func TestMachineryWorkerKilled(t *testing.T) {
	conformance.RunWorkerKilled(t, machineryHarness(singleServer(t)))
}

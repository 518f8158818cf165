package redisbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
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
				Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), MaxBlock: 20 * time.Millisecond})
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
	t.Parallel()
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
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), MaxBlock: 10 * time.Millisecond})
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

// TestMachineryRetryMovedByMachineryWorker: a retry errand sends waits in
// machinery's delayed set, where a machinery worker may be the one that
// moves it when due, re-encoding it through machinery's Signature (which
// drops errand's Attempt). The task still gets every retry its RetryCount
// allows: a moved retry must not read as a first attempt while errand's
// state records a later one.
func TestMachineryRetryMovedByMachineryWorker(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q, delayed := "mq-"+rand.Text(), "errand-mtest-delayed-"+rand.Text()
	defer rdb.Del(ctx, q, delayed)
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: delayed, MaxBlock: 10 * time.Millisecond})
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil), DefaultQueue: q})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var runs atomic.Int32
	if err := srv.RegisterTasks(map[string]any{"fail": func() error { runs.Add(1); return errors.New("fails every time") }}); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 1, Queues: map[string]int{q: 1},
		RetryPolicy: errand.RetryFunc(func(*errand.Signature, error) time.Duration { return 200 * time.Millisecond })})

	// The stand-in for machinery's delayed-task goroutine takes each retry
	// out of the delayed set as soon as it is there (before errand's fetch
	// could move it) and pushes it, re-encoded, when it is due.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var moved atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		held := map[string]float64{}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			zs, _ := rdb.ZRangeWithScores(ctx, delayed, 0, -1).Result()
			for _, z := range zs {
				if m := z.Member.(string); rdb.ZRem(ctx, delayed, m).Val() == 1 {
					held[m] = z.Score
				}
			}
			for m, due := range held {
				if float64(time.Now().UnixNano()) >= due {
					rdb.RPush(ctx, q, machineryReencode(t, m))
					delete(held, m)
					moved.Add(1)
				}
			}
		}
	}()
	w.Start()
	defer func() {
		close(stop)
		wg.Wait()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.Shutdown(sctx); err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
	}()
	sig := errand.NewSignature("fail")
	sig.RetryCount = 3
	ar, err := srv.SendTask(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := ar.Get(gctx); err == nil {
		t.Fatal("a task that always fails succeeded")
	}
	if got, want := int(runs.Load()), sig.RetryCount+1; got != want || moved.Load() == 0 {
		t.Errorf("the task ran %d times (%d retries moved by the machinery stand-in), want %d: RetryCount %d allows %d retries whoever moves them out of the delayed set",
			got, moved.Load(), want, sig.RetryCount, sig.RetryCount)
	}
}

// machineryReencode re-encodes body through machinery v2.0.16's
// tasks.Signature (its fields, no JSON tags), as its delayed-task
// goroutine does before it pushes a due task onto its queue.
func machineryReencode(t *testing.T, body string) []byte {
	var s struct {
		UUID, Name, RoutingKey string
		ETA                    *time.Time
		GroupUUID              string
		GroupTaskCount         int
		Args                   []struct {
			Name, Type string
			Value      any
		}
		Headers                     map[string]any
		Priority                    uint8
		Immutable                   bool
		RetryCount, RetryTimeout    int
		OnSuccess, OnError          []json.RawMessage
		ChordCallback               *json.RawMessage
		BrokerMessageGroupId        string
		SQSReceiptHandle            string
		StopTaskDeletionOnError     bool
		IgnoreWhenTaskNotRegistered bool
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Errorf("machinery could not decode a delayed task errand sent: %v: %s", err, body)
	}
	out, _ := json.Marshal(s)
	return out
}

// TestMachineryDeliveryCountIsPerMessage: machinery's list gives a body no
// identity, and a task's UUID is not one either (a second copy of a
// message, or errand's retry of it, carries the same UUID). A delivery is
// a redelivery (Attempt > 1) only when errand itself gave that body back
// (a lease that ran out, a Release): a second copy of a running task is a
// first delivery, which errand's worker sets aside instead of running the
// task twice, and settling one copy does not reset the count of another.
func TestMachineryDeliveryCountIsPerMessage(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q := "mq-" + rand.Text()
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), MaxBlock: 10 * time.Millisecond})
	defer b.Close()
	body := `{"UUID":"task_` + rand.Text() + `","Name":"add","RoutingKey":"` + q + `","Args":[]}`
	fetch := func(what string, want int) *driver.Delivery {
		t.Helper()
		ds, err := b.Fetch(ctx, q, 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("%s: fetch: %v, %v", what, ds, err)
		}
		if ds[0].Attempt != want {
			t.Errorf("%s: delivery %d, want %d", what, ds[0].Attempt, want)
		}
		return ds[0]
	}
	rdb.RPush(ctx, q, body)
	first := fetch("the message", 1)
	rdb.RPush(ctx, q, body)
	second := fetch("a second copy while the first is leased", 1)
	if errs := b.Ack(ctx, []*driver.Delivery{first}); errs != nil && errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := b.Release(ctx, second, time.Time{}); err != nil {
		t.Fatal(err)
	}
	again := fetch("the second copy given back, after the first was acked", 2)
	if err := b.Release(ctx, again, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	fetch("given back twice", 3)
}

// TestMachinerySecondCopyOfRunningTaskSetAside: a second message with the
// UUID of a task that runs (a producer that sent it twice, a callback sent
// again) is set aside with ErrUUIDConflict, not run beside it.
func TestMachinerySecondCopyOfRunningTaskSetAside(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q := "mq-" + rand.Text()
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), MaxBlock: 10 * time.Millisecond})
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil), DefaultQueue: q})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var runs atomic.Int32
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	if err := srv.RegisterTasks(map[string]any{"slow": func() error { runs.Add(1); started <- struct{}{}; <-release; return nil }}); err != nil {
		t.Fatal(err)
	}
	conflicts := make(chan error, 2)
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, Queues: map[string]int{q: 1}, ErrorHandler: func(err error) {
		if errors.Is(err, errand.ErrUUIDConflict) {
			conflicts <- err
		}
	}})
	w.Start()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer func() {
		free()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.Shutdown(sctx); err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
	}()
	body := `{"UUID":"task_` + rand.Text() + `","Name":"slow","RoutingKey":"` + q + `","Args":[]}`
	rdb.RPush(ctx, q, body)
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case <-started:
	case <-wait.Done():
		t.Fatal("the task never started")
	}
	rdb.RPush(ctx, q, body)
	select {
	case <-conflicts:
	case <-started:
		t.Fatal("a second copy of a running task ran beside it: it must be set aside (ErrUUIDConflict), not taken for a redelivery")
	case <-wait.Done():
		t.Fatal("the second copy of a running task was never set aside with ErrUUIDConflict")
	}
	free()
	if n := runs.Load(); n != 1 {
		t.Errorf("the task ran %d times, want once", n)
	}
}

// TestMachineryPromoteWrongType: a due delayed task whose RoutingKey names
// a key that is not a list (where machinery's RPUSH would fail) is never
// lost: it goes to the default queue; when the default queue is no list
// either it stays in the delayed set, and the tasks due after it are still
// promoted (the promote loop neither spins on it nor stops short of them).
func TestMachineryPromoteWrongType(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	id := rand.Text()
	hashKey, def, strDef, q, delayed := "mq-hash-"+id, "mq-def-"+id, "mq-strdef-"+id, "mq-"+id, "errand-mtest-delayed-"+id
	defer rdb.Del(ctx, hashKey, def, strDef, q, delayed)
	if err := rdb.HSet(ctx, hashKey, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	past := float64(time.Now().Add(-time.Minute).UnixNano())
	body := `{"UUID":"rerouted","Name":"t","RoutingKey":"` + hashKey + `","Args":[]}`
	if err := rdb.ZAdd(ctx, delayed, goredis.Z{Score: past, Member: body}).Err(); err != nil {
		t.Fatal(err)
	}
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: delayed, DefaultQueue: def, MaxBlock: 10 * time.Millisecond})
	defer b.Close()
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	ds, err := b.Fetch(fctx, def, 1, time.Minute)
	cancel()
	if err != nil || len(ds) != 1 || ds[0].ID != "rerouted" {
		t.Fatalf("fetch from the default queue: %v, %v; want the task whose RoutingKey names a hash (a due task is never lost to WRONGTYPE)", ds, err)
	}
	if n := rdb.ZCard(ctx, delayed).Val(); n != 0 {
		t.Errorf("delayed set holds %d after the task moved, want 0", n)
	}

	// 101 tasks neither their RoutingKey nor the default queue can take,
	// due before one that can.
	if err := rdb.Set(ctx, strDef, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b2 := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: delayed, DefaultQueue: strDef, MaxBlock: 10 * time.Millisecond})
	defer b2.Close()
	for i := range 101 {
		m := fmt.Sprintf(`{"UUID":"stuck-%d","Name":"t","RoutingKey":"%s","Args":[]}`, i, hashKey)
		if err := rdb.ZAdd(ctx, delayed, goredis.Z{Score: past + float64(i), Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ok := `{"UUID":"behind","Name":"t","RoutingKey":"` + q + `","Args":[]}`
	if err := rdb.ZAdd(ctx, delayed, goredis.Z{Score: past + 1000, Member: ok}).Err(); err != nil {
		t.Fatal(err)
	}
	fctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	ds, err = b2.Fetch(fctx, q, 1, time.Minute)
	cancel()
	if err != nil || len(ds) != 1 || ds[0].ID != "behind" {
		t.Fatalf("fetch: %v, %v; want the task due after 101 unmovable ones", ds, err)
	}
	if n := rdb.ZCard(ctx, delayed).Val(); n != 101 {
		t.Errorf("delayed set holds %d, want the 101 tasks no list could take, kept rather than lost", n)
	}
}

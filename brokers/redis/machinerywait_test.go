package redisbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestMachineryIdleFetchWakesOnPush: an idle Fetch on machinery's queue
// waits on machinery's list itself (BLMOVE, as machinery's workers wait
// with BLPOP), so a task a machinery producer pushes (RPUSH, nothing else)
// is taken at once, not when a poll interval or the wait's bound (30s
// here) ends. The bound on the wake-up (10s) is only against a hang: it is
// a third of the wait, which an idle fetch that polls or sleeps would sit
// out.
func TestMachineryIdleFetchWakesOnPush(t *testing.T) {
	c, name := namedClient(t, "Single", time.Minute)
	rdb := c.(*goredis.Client)
	ctx := context.Background()
	q := "mq-" + rand.Text()
	defer rdb.Del(ctx, q)
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), MaxBlock: 30 * time.Second})
	type fetched struct {
		ds  []*driver.Delivery
		err error
		at  time.Time
	}
	done := make(chan fetched, 1)
	go func() {
		ds, err := b.Fetch(ctx, q, 4, time.Minute)
		done <- fetched{ds, err, time.Now()}
	}()
	awaitBlocked(ctx, t, rdb, name) // the idle Fetch waits on machinery's list
	pushed := time.Now()
	if err := rdb.RPush(ctx, q, `{"UUID":"woken","Name":"add","RoutingKey":"`+q+`","Args":[]}`).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-done:
		if f.err != nil || len(f.ds) != 1 || f.ds[0].ID != "woken" || f.ds[0].Attempt != 1 {
			t.Fatalf("woken fetch: %v, %v; want the pushed task, delivery 1", f.ds, f.err)
		}
		t.Logf("pushed → fetched: %v", f.at.Sub(pushed))
		if errs := b.Ack(ctx, f.ds); errs != nil && errs[0] != nil {
			t.Errorf("ack: %v", errs[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a task pushed onto machinery's list did not end an idle Fetch's wait within 10s (its MaxBlock is 30s): an idle fetch must take a new task at once, as machinery's BLPOP does")
	}
	b.Close()
	if n := rdb.Exists(ctx, "{errand-mtest:"+q+"}:moving").Val(); n != 0 {
		t.Errorf("the hand-over list still holds the task after the fetch leased it")
	}
}

// TestMachineryFetchLeasesHandedOverTask: a task a waiting fetch moved into
// the queue's hand-over list whose fetch script never ran (the connection
// dropped between the two, a crash) is leased by the next Fetch of the
// queue, before the tasks on machinery's list: at least once, never
// stranded.
func TestMachineryFetchLeasesHandedOverTask(t *testing.T) {
	rdb := singleServer(t)
	ctx := context.Background()
	q := "mq-" + rand.Text()
	moving := "{errand-mtest:" + q + "}:moving"
	defer rdb.Del(ctx, q, moving)
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", DelayedTasksKey: "errand-mtest-delayed-" + rand.Text(), MaxBlock: 10 * time.Millisecond})
	defer b.Close()
	if err := rdb.RPush(ctx, moving, `{"UUID":"handed","Name":"add","RoutingKey":"`+q+`","Args":[]}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, q, `{"UUID":"next","Name":"add","RoutingKey":"`+q+`","Args":[]}`).Err(); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, scaled(10*time.Second))
	defer cancel()
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "handed" {
		t.Fatalf("fetch: %v, %v; want the task waiting in the hand-over list first (it was at the list's head when a wait took it)", ds, err)
	}
	ds2, err := b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds2) != 1 || ds2[0].ID != "next" {
		t.Fatalf("second fetch: %v, %v; want the task on machinery's list", ds2, err)
	}
	for _, d := range append(ds, ds2...) {
		if errs := b.Ack(ctx, []*driver.Delivery{d}); errs != nil && errs[0] != nil {
			t.Errorf("ack %s: %v", d.ID, errs[0])
		}
	}
}

// TestMachineryFetchWithoutBLMOVE: on a server without BLMOVE (Redis
// before 6.2; here a private redis-server with the command renamed away)
// an idle Fetch on machinery's queue falls back to looking again every
// 100ms: no error, a pushed task is delivered, and an idle wait of half a
// second sends a handful of commands, not a spin of fetch scripts.
func TestMachineryFetchWithoutBLMOVE(t *testing.T) {
	addr, _ := redistest.PrivateServer(t, "--rename-command", "BLMOVE", "")
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	q := "mq-" + rand.Text()
	b := redisbroker.NewMachinery(rdb, &redisbroker.MachineryOptions{Prefix: "errand-mtest", MaxBlock: 10 * time.Second})
	defer b.Close()
	// The first idle Fetch finds BLMOVE missing; idle Fetches then poll.
	fctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	ds, err := b.Fetch(fctx, q, 1, time.Minute)
	cancel()
	if len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle Fetch on a server without BLMOVE: %v, %v; want nothing by its deadline", ds, err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	fctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = b.Fetch(fctx, q, 1, time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle Fetch: %v, want its deadline", err)
	}
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_commands_processed:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	if n > 100 {
		t.Errorf("an idle Fetch of half a second sent %d commands: it must look again every 100ms without BLMOVE, not spin", n)
	}
	// The push comes while the Fetch below is idle (or, on a slow
	// machine, before it: then its first look takes it).
	push := time.AfterFunc(150*time.Millisecond, func() {
		rdb.RPush(ctx, q, `{"UUID":"polled","Name":"add","RoutingKey":"`+q+`","Args":[]}`)
	})
	defer push.Stop()
	fctx, cancel = context.WithTimeout(ctx, scaled(10*time.Second))
	defer cancel()
	ds, err = b.Fetch(fctx, q, 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "polled" {
		t.Fatalf("Fetch on a server without BLMOVE: %v, %v; want the pushed task", ds, err)
	}
}

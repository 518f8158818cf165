package redisbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// carriedStartFixture is a broker and a same-server backend on the single
// Redis under a fresh prefix, with the broker's carried fetch.
func carriedStartFixture(t *testing.T) (*redisbroker.Broker, *sameServerBackend, fetchStartFunc) {
	t.Helper()
	rdb, _ := countedClient(t, "Single")
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := newSameServerBackend(t, rdb, prefix)
	fetch := carryStart(b, be)
	if fetch == nil {
		t.Fatal("CarryStart = nil on the broker's own single server; want a carrier")
	}
	return b, be, fetch
}

// TestCarryStartTable: the fetch script's begin (the broker's Lua copy of
// the start rule) decides as driver.StartRequest.Allows, the one
// definition, on every row of conformance.StartCases (the table the Redis
// backend's Start script runs too), for a previous state in Go's layout
// (read with patterns) and in another (read with cjson); a refused start
// leaves the state as it was, a written one is STARTED with the times
// the fetch answers.
func TestCarryStartTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b, be, fetch := carriedStartFixture(t)
	name := conformance.StartCaseTask
	created := time.Date(2020, 1, 2, 3, 4, 5, 678e6, time.UTC)
	for _, sc := range conformance.StartCases() {
		prev, attempt, first := sc.Prev, sc.Attempt, sc.FirstDelivery
		for _, layout := range []string{"go", "other"} {
			if prev == nil && layout == "other" {
				continue // no state: one layout only
			}
			t.Run(sc.Name+"/"+layout, func(t *testing.T) {
				id := "tab-" + rand.Text()
				queue := "tab-" + rand.Text()[:8]
				if err := b.Publish(ctx, driver.Message{ID: id, Queue: queue, Body: []byte("x"), Task: name, TaskAttempt: attempt}); err != nil {
					t.Fatal(err)
				}
				if !first { // a redelivery: leased once without starting
					ds, err := b.Fetch(ctx, queue, 1, time.Minute)
					if err != nil || len(ds) != 1 {
						t.Fatalf("fetch: %v, %v", ds, err)
					}
					if err := b.Release(ctx, ds[0], time.Time{}); err != nil {
						t.Fatal(err)
					}
				}
				raw := storeStartPrev(ctx, t, be.rdb, be.key(id), prev, id, created, layout)
				ds, starts, at, err := fetch(ctx, queue, 1, time.Minute, []string{"ns:a", name})
				if err != nil || len(ds) != 1 || len(starts) != 1 || starts[0] == nil {
					t.Fatalf("carried fetch: %v, starts %v, %v; want one delivery, started", ds, starts, err)
				}
				d, st := ds[0], starts[0]
				if d.Task != name || d.TaskAttempt != attempt || d.ID != id || (d.Attempt == 1) != first {
					t.Fatalf("delivery %q: task %q attempt %d, delivery %d; want %q, %d, first %v", d.ID, d.Task, d.TaskAttempt, d.Attempt, name, attempt, first)
				}
				if st.Err != nil {
					t.Fatalf("start: %v", st.Err)
				}
				if want := sc.Want(); st.Written != want {
					t.Fatalf("previous %s: written %v; driver.StartRequest.Allows says %v", raw, st.Written, want)
				}
				if (st.Prev == nil) != (prev == nil) {
					t.Fatalf("Prev %+v; want the state before (%s)", st.Prev, raw)
				}
				checkStartedOrUntouched(ctx, t, be.rdb, be.key(id), raw, st.Written, id, name, attempt, prev != nil, created, at)
			})
		}
	}
}

// storeStartPrev stores prev (nil: nothing) as task id's state at key,
// created at created, in Go's layout or, for "other", the same fields in
// another order; it returns what it stored.
func storeStartPrev(ctx context.Context, t *testing.T, rdb goredis.UniversalClient, key string, prev *driver.TaskState, id string, created time.Time, layout string) string {
	t.Helper()
	if prev == nil {
		return ""
	}
	p := *prev
	p.TaskUUID, p.CreatedAt = id, created
	v, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	if layout == "other" { // the same state, its keys in another order
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			t.Fatal(err)
		}
		v, _ = json.Marshal(m) // sorted keys: attempt, created_at, ...
	}
	if err := rdb.Set(ctx, key, v, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	return string(v)
}

// checkStartedOrUntouched checks the state at key after a start: as raw
// when not written, else STARTED for task id at the fetch's time at,
// created at created when it had a state (hadPrev), else at at.
func checkStartedOrUntouched(ctx context.Context, t *testing.T, rdb goredis.UniversalClient, key, raw string, written bool, id, name string, attempt int, hadPrev bool, created, at time.Time) {
	t.Helper()
	now, err := rdb.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !written {
		if now != raw {
			t.Fatalf("a refused start changed the state from %s to %s", raw, now)
		}
		return
	}
	var got driver.TaskState
	if err := json.Unmarshal([]byte(now), &got); err != nil {
		t.Fatalf("STARTED %s: %v", now, err)
	}
	wantCreated := at
	if hadPrev {
		wantCreated = created
	}
	if got.TaskUUID != id || got.TaskName != name || got.State != driver.StateStarted || got.Attempt != attempt ||
		!got.CreatedAt.Equal(wantCreated) || !got.StartedAt.Equal(at) {
		t.Fatalf("STARTED written as %s; want task %s %q attempt %d created %v started %v", now, id, name, attempt, wantCreated, at)
	}
}

// TestCarryStartUnreadableState: a task state the fetch script cannot
// read (not JSON, JSON that is no object, a key of another type) leaves
// that delivery unstarted (for Start to answer) and costs no message: the
// fetch leases all it popped.
func TestCarryStartUnreadableState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, be, fetch := carriedStartFixture(t)
	queue := "bad-" + rand.Text()[:8]
	good1, notJSON, notObject, hash, good2 := "g1-"+rand.Text(), "nj-"+rand.Text(), "no-"+rand.Text(), "h-"+rand.Text(), "g2-"+rand.Text()
	bad := map[string]bool{notJSON: true, notObject: true, hash: true}
	if err := be.rdb.Set(ctx, be.key(notJSON), "{not json", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := be.rdb.Set(ctx, be.key(notObject), "42", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := be.rdb.HSet(ctx, be.key(hash), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	be.rdb.Expire(ctx, be.key(hash), time.Minute)
	var msgs []driver.Message
	for _, id := range []string{good1, notJSON, notObject, hash, good2} {
		msgs = append(msgs, driver.Message{ID: id, Queue: queue, Body: []byte("x"), Task: "t", TaskAttempt: 1})
	}
	if err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	ds, starts, _, err := fetch(ctx, queue, len(msgs), time.Minute, []string{"t"})
	if err != nil {
		t.Fatalf("carried fetch over unreadable states: %v; want the deliveries", err)
	}
	if len(ds) != len(msgs) || len(starts) != len(msgs) {
		t.Fatalf("carried fetch: %d deliveries, %d starts; want %d each", len(ds), len(starts), len(msgs))
	}
	for i, d := range ds {
		switch {
		case bad[d.ID] && starts[i] != nil:
			t.Errorf("task %s with an unreadable state: start %+v; want none (left to Start)", d.ID, starts[i])
		case !bad[d.ID] && (starts[i] == nil || !starts[i].Written):
			t.Errorf("task %s: start %+v; want written", d.ID, starts[i])
		}
	}
	if v, err := be.rdb.Get(ctx, be.key(notJSON)).Result(); err != nil || v != "{not json" {
		t.Errorf("unreadable state now %q (%v); want it untouched", v, err)
	}
}

// TestCarryOnRingRefused: a Ring spreads keys over its shards by hash, so
// the fetch and ack scripts, run on the shard of the queue's keys, would
// write task states where the backend (on the same Ring) never reads
// them: a broker on a Ring carries no starts and no settles, even with
// the one client value shared by both.
func TestCarryOnRingRefused(t *testing.T) {
	o, err := goredis.ParseURL(os.Getenv("ERRAND_REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": o.Addr}})
	defer ring.Close()
	b := redisbroker.New(ring, &redisbroker.Options{Prefix: "errand-test-ring"})
	be := newSameServerBackend(t, ring, "errand-test-ring")
	if carryStart(b, be) != nil {
		t.Error("CarryStart on a Ring: a carrier; want nil (its script cannot reach the state keys' shards)")
	}
	if carrySettle(b, be) != nil {
		t.Error("CarrySettle on a Ring: a carrier; want nil (its script cannot reach the state keys' shards)")
	}
}

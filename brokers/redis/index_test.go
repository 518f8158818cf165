package redisbroker_test

// Issue 24, item 5: Find by task ID through an index, not a scan of the
// queue; and a queue of which nothing remains leaves the queue set.

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// TestFindByIndex: every message queued is in the index K:ids (task ID ->
// message ID) from its publish until its ack, archive or purge, and Find
// answers from it in each state, in a queue of 3000 messages. The index
// is read here to show Find has one to read: without it, Find could only
// scan.
func TestFindByIndex(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := "errand-test-find-" + rand.Text()[:8]
			dropAll(t, rdb, prefix)
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			defer b.Close()
			idx := "{" + prefix + ":q}:ids"
			const n = 3000
			msgs := make([]driver.Message, n)
			for i := range msgs {
				msgs[i] = driver.Message{ID: fmt.Sprint("task-", i), Queue: "q", Body: []byte("x")}
			}
			msgs[n-1].NotBefore = time.Now().Add(time.Hour)
			if err := b.Publish(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
			if got, _ := rdb.HLen(ctx, idx).Result(); got != n {
				t.Fatalf("find promise broken: the index holds %d task IDs after publishing %d messages; want every queued message indexed", got, n)
			}
			find := func(id string) driver.ListState {
				t.Helper()
				l, state, ok, err := b.Find(ctx, "q", id)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return ""
				}
				if l.ID != id {
					t.Fatalf("Find(%q) returned the message of %q", id, l.ID)
				}
				return state
			}
			if s := find("task-2998"); s != driver.ListPending {
				t.Errorf("find promise broken: a pending message (the 2999th of 3000) found as %q; want pending", s)
			}
			if s := find(fmt.Sprint("task-", n-1)); s != driver.ListScheduled {
				t.Errorf("find promise broken: a delayed message found as %q; want scheduled", s)
			}
			ds, err := b.Fetch(ctx, "q", 2, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if s := find(ds[0].ID); s != driver.ListInFlight {
				t.Errorf("find promise broken: a fetched message found as %q; want inflight", s)
			}
			if errs := b.Ack(ctx, ds[:1]); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if err := b.Reject(ctx, ds[1], "no"); err != nil {
				t.Fatal(err)
			}
			if s := find(ds[0].ID); s != driver.ListCompleted {
				t.Errorf("find promise broken: an acked message found as %q; want completed", s)
			}
			if s := find(ds[1].ID); s != "" {
				t.Errorf("find promise broken: an archived message found as %q; want not found (ArchivedEntry has it)", s)
			}
			for _, id := range []string{ds[0].ID, ds[1].ID} {
				if ok, _ := rdb.HExists(ctx, idx, id).Result(); ok {
					t.Errorf("find promise broken: %q is still in the index after its ack or archive", id)
				}
			}
			held, err := b.Fetch(ctx, "q", 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Purge(ctx, "q"); err != nil {
				t.Fatal(err)
			}
			left, _ := rdb.HKeys(ctx, idx).Result()
			if !slices.Equal(left, []string{held[0].ID}) {
				t.Errorf("find promise broken: after a purge the index holds %v; want only the message in flight (%s)", left, held[0].ID)
			}
			if s := find(held[0].ID); s != driver.ListInFlight {
				t.Errorf("find promise broken: the message in flight across a purge found as %q; want inflight", s)
			}
		})
	}
}

// TestEmptyQueueLeavesSet: a queue of which nothing remains (no message
// queued, archived or completed) is no longer listed by Queues; a publish
// lists it again; a queue whose completed messages aged out
// (CompletedMaxAge) leaves too.
func TestEmptyQueueLeavesSet(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := "errand-test-unlist-" + rand.Text()[:8]
			dropAll(t, rdb, prefix)
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMax: -1})
			defer b.Close()
			listed := func(q string) bool {
				t.Helper()
				qs, err := b.Queues(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Contains(qs, q)
			}
			run := func(b *redisbroker.Broker, q string) {
				t.Helper()
				if err := b.Publish(ctx, driver.Message{ID: "t-" + q, Queue: q, Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				ds, err := b.Fetch(ctx, q, 1, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if !listed(q) {
					t.Fatalf("queue-set promise broken: queue %s with a message in flight is not listed", q)
				}
				if errs := b.Ack(ctx, ds); errs[0] != nil {
					t.Fatal(errs[0])
				}
			}
			run(b, "once")
			if listed("once") {
				t.Errorf("queue-set promise broken: queue once, its only message acked (CompletedMax -1: nothing kept), is still listed; a queue of which nothing remains must leave the set")
			}
			if err := b.Publish(ctx, driver.Message{ID: "again", Queue: "once", Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			if !listed("once") {
				t.Errorf("queue-set promise broken: queue once is not listed after a new publish")
			}

			aging := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMaxAge: time.Millisecond})
			defer aging.Close()
			run(aging, "aging")
			deadline := time.Now().Add(10 * time.Second)
			for {
				qs, err := aging.Queues(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(qs, "aging") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("queue-set promise broken: queue aging, whose one completed message is older than CompletedMaxAge (1ms), is still listed after 10s")
				}
				time.Sleep(10 * time.Millisecond) // poll: the entry ages by the server's clock
			}
			if got, _ := aging.List(ctx, "aging", driver.ListCompleted, 0, 10); len(got) != 1 {
				t.Errorf("queue-set promise broken: the completed list of an unlisted queue holds %d entries, want its 1 kept (Queues deletes nothing)", len(got))
			}

			// A paused queue stays listed, empty or not, so an operator can
			// resume it.
			run(b, "idle")
			if err := b.Pause(ctx, "idle"); err != nil {
				t.Fatal(err)
			}
			if !listed("idle") {
				t.Errorf("queue-set promise broken: the paused empty queue idle left the set; an operator could no longer see or resume it")
			}

			// Listing queues never trims an archive: its retention is the
			// workers' (WorkerConfig.ArchiveRetention), not the listing
			// broker's options.
			small := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, ArchiveMaxCount: 1, ArchiveMaxAge: time.Millisecond})
			defer small.Close()
			for _, id := range []string{"a1", "a2"} {
				if err := b.Publish(ctx, driver.Message{ID: id, Queue: "kept", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				ds, err := b.Fetch(ctx, "kept", 1, time.Minute)
				if err != nil || len(ds) != 1 {
					t.Fatalf("Fetch: %v, %v", ds, err)
				}
				if err := b.Archive(ctx, ds[0], driver.ArchiveEntry{Message: ds[0].Message, Reason: "test"}, driver.Retention{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := small.Queues(ctx); err != nil {
				t.Fatal(err)
			}
			if es, err := b.Archived(ctx, "kept", 0, 10); err != nil || len(es) != 2 {
				t.Errorf("archive promise broken: after Queues on a broker with ArchiveMaxCount 1 the archive holds %d entries (%v), want both kept: listing queues must delete nothing", len(es), err)
			}
		})
	}
}

package redisbroker_test

// The operator's capabilities where the conformance kit cannot see Redis:
// the archive outliving the client, retention trimmed inside the script,
// older versions' dead letters, round trips of ack and publish, and the
// global keys on Redis Cluster.

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// freshPrefix returns a prefix of its own for one test and deletes its keys
// (queue keys and global keys, on every master of a cluster) at the end.
func freshPrefix(t *testing.T, rdb goredis.UniversalClient) string {
	prefix := "errand-op-" + rand.Text()[:8]
	t.Cleanup(func() {
		ctx := context.Background()
		del := func(ctx context.Context, c *goredis.Client) error {
			for _, pat := range []string{"{" + prefix + ":*", "{" + prefix + "}:*"} {
				keys, _ := c.Keys(ctx, pat).Result()
				for _, k := range keys {
					c.Del(ctx, k)
				}
			}
			return nil
		}
		switch c := rdb.(type) {
		case *goredis.ClusterClient:
			c.ForEachMaster(ctx, del)
		case *goredis.Client:
			del(ctx, c)
		}
	})
	return prefix
}

func fetchOne(ctx context.Context, t *testing.T, b *redisbroker.Broker, queue string) *driver.Delivery {
	t.Helper()
	ds, err := b.Fetch(ctx, queue, 1, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("fetch from %q: %d deliveries, %v; want 1", queue, len(ds), err)
	}
	return ds[0]
}

func eachServer(t *testing.T, fn func(t *testing.T, rdb goredis.UniversalClient)) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, rdb)
		})
	}
}

func TestArchiveOutlivesClient(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		prefix := freshPrefix(t, rdb)
		b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
		q := "q"
		if err := b.Publish(ctx, driver.Message{ID: "a", Queue: q, Body: []byte("body\nwith newline")}); err != nil {
			t.Fatal(err)
		}
		d := fetchOne(ctx, t, b, q)
		at := time.Now().Add(-time.Second)
		e := driver.ArchiveEntry{Message: d.Message, Reason: "retries exhausted", Error: "boom\nline two", Attempts: 3, At: at}
		if err := b.Archive(ctx, d, e, driver.Retention{}); err != nil {
			t.Fatal(err)
		}
		if err := ackOne(ctx, b, d); !errors.Is(err, driver.ErrLeaseLost) {
			t.Fatalf("archive promise broken: after Archive, Ack of the same delivery returned %v, want ErrLeaseLost (archived is settled)", err)
		}
		b.Close()

		// A new broker on a new client: the archive is on the server.
		b2 := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
		defer b2.Close()
		got, err := b2.ArchivedEntry(ctx, q, "a")
		if err != nil {
			t.Fatalf("archive promise broken: a new broker does not find the archived entry: %v", err)
		}
		if string(got.Body) != "body\nwith newline" || got.Reason != e.Reason || got.Error != e.Error || got.Attempts != 3 || !got.At.Equal(at) || got.Queue != q {
			t.Fatalf("archive promise broken: entry came back as %+v, want %+v", got, e)
		}
		st, err := b2.Stats(ctx, q)
		if err != nil || st.Dead != 1 || st.InFlight != 0 || st.Pending != 0 {
			t.Fatalf("stats promise broken: after one archive Stats is %+v (%v); want Dead 1, nothing else", st, err)
		}
		if err := b2.Requeue(ctx, q, "a", got.Message); err != nil {
			t.Fatal(err)
		}
		if err := b2.Requeue(ctx, q, "a", got.Message); !errors.Is(err, driver.ErrNotArchived) {
			t.Fatalf("requeue promise broken: a second Requeue returned %v, want ErrNotArchived", err)
		}
		d = fetchOne(ctx, t, b2, q)
		if d.ID != "a" || string(d.Body) != "body\nwith newline" || d.Attempt != 1 {
			t.Fatalf("requeue promise broken: requeued message came back as %+v, want ID a, the body, attempt 1", d)
		}
		if st, _ := b2.Stats(ctx, q); st.Dead != 0 {
			t.Fatalf("requeue promise broken: Stats.Dead %d after the only entry was requeued", st.Dead)
		}
	})
}

func TestArchiveRetentionInScript(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := redisbroker.New(rdb, &redisbroker.Options{Prefix: freshPrefix(t, rdb)})
		defer b.Close()
		q := "q"
		var ids []string
		for i := range 5 {
			ids = append(ids, string(rune('a'+i)))
		}
		for _, id := range ids {
			if err := b.Publish(ctx, driver.Message{ID: id, Queue: q, Body: []byte(id)}); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now()
		for i, id := range ids {
			d := fetchOne(ctx, t, b, q)
			// Archived 4h, 3h, ... 0h ago, in this order.
			at := now.Add(-time.Duration(len(ids)-1-i) * time.Hour)
			if err := b.Archive(ctx, d, driver.ArchiveEntry{Message: d.Message, Reason: "r", At: at}, driver.Retention{MaxCount: 4, MaxAge: 150 * time.Minute}); err != nil {
				t.Fatalf("archive %s: %v", id, err)
			}
		}
		es, err := b.Archived(ctx, q, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			got = append(got, e.ID)
		}
		// MaxCount 4 drops a; MaxAge 2h30 drops b (3h) and c (2h30 is the
		// bound... c is 2h old, kept), newest first.
		if want := []string{"e", "d", "c"}; !slices.Equal(got, want) {
			t.Fatalf("retention promise broken: with MaxCount 4 and MaxAge 2h30 the archive holds %v, want %v newest first", got, want)
		}
		if _, err := b.ArchivedEntry(ctx, q, "b"); !errors.Is(err, driver.ErrNotArchived) {
			t.Fatalf("retention promise broken: an entry trimmed by age is still found: %v", err)
		}
		if n, err := b.DeleteArchived(ctx, q, "d", "zz", "a"); n != 1 || err != nil {
			t.Fatalf("DeleteArchived(d, zz, a) = %d, %v; want 1 (only d is archived)", n, err)
		}
		if es, _ := b.Archived(ctx, q, 1, 5); len(es) != 1 || es[0].ID != "c" {
			t.Fatalf("paging promise broken: Archived(offset 1) = %+v, want [c]", es)
		}
	})
}

func TestRejectArchivesWithDefaults(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := redisbroker.New(rdb, &redisbroker.Options{Prefix: freshPrefix(t, rdb), ArchiveMaxCount: 2})
		defer b.Close()
		q := "q"
		for _, id := range []string{"a", "b", "c"} {
			b.Publish(ctx, driver.Message{ID: id, Queue: q, Body: []byte(id)})
			d := fetchOne(ctx, t, b, q)
			if err := b.Reject(ctx, d, "undecodable"); err != nil {
				t.Fatal(err)
			}
		}
		dl, err := setAside(ctx, b, q)
		if err != nil || len(dl) != 2 || dl[0].ID != "b" || dl[1].ID != "c" || dl[1].Reason != "undecodable" {
			t.Fatalf("reject promise broken: with ArchiveMaxCount 2, the archive after rejecting a, b, c = %+v, %v; want b, c (oldest first) with the reason", dl, err)
		}
		e, err := b.ArchivedEntry(ctx, q, "c")
		if err != nil || e.Reason != "undecodable" || e.Error != "undecodable" || e.Attempts != 1 {
			t.Fatalf("reject promise broken: archive entry %+v, %v; want reason and error %q, attempts 1", e, err, "undecodable")
		}
	})
}

// TestOlderDeadLettersMigrate writes dead letters the way the previous
// version did (K:dead, K:reasons) and reads them through the archive.
func TestOlderDeadLettersMigrate(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := freshPrefix(t, rdb)
	k := "{" + prefix + ":q}:"
	at := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	rdb.HSet(ctx, k+"msgs", "mid1", "task1\nold body")
	rdb.RPush(ctx, k+"dead", "mid1")
	rdb.HSet(ctx, k+"reasons", "mid1", strconv.FormatInt(at.UnixMilli(), 10)+" cannot decode")
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	defer b.Close()
	st, err := b.Stats(ctx, "q")
	if err != nil || st.Dead != 1 {
		t.Fatalf("migration promise broken: Stats over an older dead letter = %+v, %v; want Dead 1", st, err)
	}
	e, err := b.ArchivedEntry(ctx, "q", "task1")
	if err != nil || string(e.Body) != "old body" || e.Reason != "cannot decode" || !e.At.Equal(at) {
		t.Fatalf("migration promise broken: older dead letter reads as %+v, %v; want body %q, reason %q, at %v", e, err, "old body", "cannot decode", at)
	}
	if n := rdb.Exists(ctx, k+"dead", k+"reasons", k+"msgs").Val(); n != 0 {
		t.Fatalf("migration promise broken: %d of the old keys remain after migration", n)
	}
}

func TestListStates(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := redisbroker.New(rdb, &redisbroker.Options{Prefix: freshPrefix(t, rdb), CompletedMax: 2})
		defer b.Close()
		q := "q"
		due := time.Now().Add(time.Hour)
		b.Publish(ctx,
			driver.Message{ID: "p1", Queue: q, Body: []byte("1")},
			driver.Message{ID: "p2", Queue: q, Body: []byte("2")},
			driver.Message{ID: "p3", Queue: q, Body: []byte("3")},
			driver.Message{ID: "p4", Queue: q, Body: []byte("4")},
			driver.Message{ID: "s1", Queue: q, Body: []byte("s"), NotBefore: due})
		ids := func(ls []driver.Listed, err error) []string {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, l := range ls {
				out = append(out, l.ID)
			}
			return out
		}
		if got := ids(b.List(ctx, q, driver.ListPending, 1, 2)); !slices.Equal(got, []string{"p2", "p3"}) {
			t.Fatalf("list promise broken: pending page (offset 1, limit 2) = %v, want [p2 p3]", got)
		}
		sc, err := b.List(ctx, q, driver.ListScheduled, 0, 10)
		if err != nil || len(sc) != 1 || sc[0].ID != "s1" || sc[0].At.Before(due.Add(-time.Millisecond)) || sc[0].At.After(due.Add(time.Millisecond)) {
			t.Fatalf("list promise broken: scheduled = %+v, %v; want s1 due at %v", sc, err, due)
		}
		var ds []*driver.Delivery
		for range 4 {
			ds = append(ds, fetchOne(ctx, t, b, q))
		}
		if got := ids(b.List(ctx, q, driver.ListInFlight, 0, 10)); !slices.Equal(got, []string{"p1", "p2", "p3", "p4"}) {
			t.Fatalf("list promise broken: in flight = %v, want [p1 p2 p3 p4]", got)
		}
		for _, d := range ds[:3] {
			if err := ackOne(ctx, b, d); err != nil {
				t.Fatal(err)
			}
		}
		done, err := b.List(ctx, q, driver.ListCompleted, 0, 10)
		if got := ids(done, err); !slices.Equal(got, []string{"p3", "p2"}) {
			t.Fatalf("list promise broken: with CompletedMax 2 after acking p1, p2, p3 completed = %v, want [p3 p2] newest first", got)
		}
		if string(done[0].Body) != "3" || time.Since(done[0].At) > time.Minute {
			t.Fatalf("list promise broken: completed entry %+v; want body 3 and a recent ack time", done[0])
		}
		st, err := b.Stats(ctx, q)
		if err != nil || st.Completed != 3 || st.InFlight != 1 || st.Delayed != 1 {
			t.Fatalf("stats promise broken: Stats = %+v, %v; want Completed 3 (acks, not the kept list), InFlight 1, Delayed 1", st, err)
		}
		if _, err := b.List(ctx, q, "bogus", 0, 1); err == nil {
			t.Fatal("list promise broken: an unknown state is not an error")
		}
	})
}

// counter counts the commands and pipelines a client sends.
type counter struct{ calls, pipes atomic.Int64 }

func (c *counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.calls.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.pipes.Add(1)
		return next(ctx, cmds)
	}
}

// TestOneRoundTripPerAckAndPublish: keeping the completed list, counting
// acks and recording the queue name cost no extra round trip.
func TestOneRoundTripPerAckAndPublish(t *testing.T) {
	servers(t)
	o, _ := goredis.ParseURL(os.Getenv("ERRAND_REDIS_URL"))
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	var c counter
	rdb.AddHook(&c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: freshPrefix(t, rdb)})
	defer b.Close()
	q := "q"
	// Warm up: the server caches the scripts.
	b.Publish(ctx, driver.Message{ID: "w", Queue: q, Body: []byte("w")})
	ackOne(ctx, b, fetchOne(ctx, t, b, q))

	c.calls.Store(0)
	c.pipes.Store(0)
	if err := b.Publish(ctx, driver.Message{ID: "m", Queue: q, Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	if calls, pipes := c.calls.Load(), c.pipes.Load(); calls != 0 || pipes != 1 {
		t.Fatalf("round-trip promise broken: Publish sent %d commands and %d pipelines, want one pipeline", calls, pipes)
	}
	d := fetchOne(ctx, t, b, q)
	c.calls.Store(0)
	c.pipes.Store(0)
	if err := ackOne(ctx, b, d); err != nil {
		t.Fatal(err)
	}
	if calls, pipes := c.calls.Load(), c.pipes.Load(); calls != 1 || pipes != 0 {
		t.Fatalf("round-trip promise broken: Ack sent %d commands and %d pipelines, want one command", calls, pipes)
	}
	if qs, _ := b.Queues(ctx); !slices.Equal(qs, []string{q}) {
		t.Fatalf("queues promise broken: Queues = %v, want [%s]", qs, q)
	}
}

func TestQueuesPauseHeartbeats(t *testing.T) {
	eachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		prefix := freshPrefix(t, rdb)
		b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
		defer b.Close()
		// Queues of several slots in one publish (one pipeline).
		var msgs []driver.Message
		var want []string
		for _, q := range []string{"a", "b", "c", "d", "e"} {
			msgs = append(msgs, driver.Message{ID: q, Queue: q, Body: []byte(q)})
			want = append(want, q)
		}
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		qs, err := b.Queues(ctx)
		slices.Sort(qs)
		if err != nil || !slices.Equal(qs, want) {
			t.Fatalf("queues promise broken: Queues = %v, %v; want %v", qs, err, want)
		}
		if err := b.Pause(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		b.Pause(ctx, "c")
		b.Resume(ctx, "c")
		// Another broker (another process) sees the flag.
		b2 := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
		defer b2.Close()
		if p, err := b2.Paused(ctx); err != nil || !slices.Equal(p, []string{"a"}) {
			t.Fatalf("pause promise broken: Paused = %v, %v; want [a]", p, err)
		}

		b.Beat(ctx, "w1", []byte("one"), time.Hour)
		b.Beat(ctx, "w2", []byte("two"), 200*time.Millisecond)
		b.Beat(ctx, "w3", []byte("three"), time.Hour)
		b.Beat(ctx, "w3", []byte("three again"), time.Hour)
		b.Unbeat(ctx, "w1")
		deadline := time.Now().Add(10 * time.Second)
		for {
			beats, err := b2.Beats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, x := range beats {
				got = append(got, string(x))
			}
			slices.Sort(got)
			if slices.Equal(got, []string{"three again"}) {
				break
			}
			if time.Now().After(deadline) || !slices.Contains(got, "three again") || slices.Contains(got, "one") {
				t.Fatalf("heartbeat promise broken: Beats = %q; want only the latest beat of w3 (w1 unbeaten, w2's 200ms ttl run out)", got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

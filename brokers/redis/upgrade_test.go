package redisbroker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestOlderVersionKeys: queues an older version wrote (a pending list and
// dead letters, no P:queues) are listed by Queues, and their dead letters
// are in the archive when it is read — including dead letters an older
// worker writes after the first read (a rolling upgrade).
func TestOlderVersionKeys(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) { olderVersionKeys(t, rdb) })
	}
}

func olderVersionKeys(t *testing.T, rdb goredis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := freshPrefix(t, rdb)
	k := func(q, name string) string { return "{" + prefix + ":" + q + "}:" + name }
	// What an older version left: a message on a pending list, a dead
	// letter on another queue.
	if err := rdb.LPush(ctx, k("oldpending", "pending"), "raw text").Err(); err != nil {
		t.Fatal(err)
	}
	dead := func(q, mid string) {
		t.Helper()
		at := time.Now().UnixMilli()
		for _, err := range []error{
			rdb.HSet(ctx, k(q, "msgs"), mid, mid+"\n{\"body\":1}").Err(),
			rdb.HSet(ctx, k(q, "reasons"), mid, fmt.Sprintf("%d bad input", at)).Err(),
			rdb.RPush(ctx, k(q, "dead"), mid).Err(),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	dead("olddead", "m1")

	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	defer b.Close()
	qs, err := b.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(qs)
	if want := []string{"olddead", "oldpending"}; !slices.Equal(qs, want) {
		t.Errorf("Queues over keys of an older version (no P:queues) = %v, want %v", qs, want)
	}
	archived := func() []string {
		t.Helper()
		es, err := b.Archived(ctx, "olddead", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range es {
			ids = append(ids, e.ID)
		}
		slices.Sort(ids)
		return ids
	}
	if got := archived(); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("Archived of a queue with an older version's dead letter = %v, want [m1]", got)
	}
	// An older worker, still running, rejects another message: the same
	// Broker value finds it on its next read.
	dead("olddead", "m2")
	if got := archived(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("after an older worker wrote another dead letter, Archived = %v, want [m1 m2] (migration must not run only once per Broker)", got)
	}
	if st, err := b.Stats(ctx, "olddead"); err != nil || st.Dead != 2 {
		t.Errorf("Stats = %+v, %v; want Dead 2", st, err)
	}

	// A queue only fetched from (its producers are older, and add it to no
	// set) is listed too once it holds something: Fetch added it to the
	// set, and Queues keeps the queues that are not empty (issue 24, item
	// 5: an empty one leaves the set).
	fctx, fcancel := context.WithTimeout(ctx, 200*time.Millisecond) // the queue is empty: Fetch waits
	_, err = b.Fetch(fctx, "fetchedonly", 1, time.Second)
	fcancel()
	if err != nil && fctx.Err() == nil {
		t.Fatal(err)
	}
	if err := rdb.LPush(ctx, k("fetchedonly", "pending"), "from an older producer").Err(); err != nil {
		t.Fatal(err)
	}
	qs, err = b.Queues(ctx) // b scanned the keyspace already: the set alone
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(qs, "fetchedonly") {
		t.Errorf("Queues = %v; want the queue a worker fetched from listed", qs)
	}
}

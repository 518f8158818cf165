package redisbroker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// TestPublishWakeListBounded: publishes with no fetcher waiting leave a
// bounded wake-up list (K:notify), whichever shape the publish takes (on
// one node the transaction trims the list only once it is over its
// bound), and every message is queued once, in order.
func TestPublishWakeListBounded(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := freshPrefix(t, rdb)
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			defer b.Close()
			notify := "{" + prefix + ":q}:notify"
			const n = 700
			longest := int64(0)
			for i := range n {
				if err := b.Publish(ctx, driver.Message{ID: fmt.Sprint("m", i), Queue: "q", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				longest = max(longest, rdb.LLen(ctx, notify).Val())
			}
			// 256 kept, plus at most one publish's tokens before the trim.
			if longest > 256+64 {
				t.Errorf("wake-up promise broken: K:notify grew to %d tokens over %d publishes with no fetcher; want it bounded near 256", longest, n)
			}
			if st, err := b.Stats(ctx, "q"); err != nil || st.Pending != n {
				t.Fatalf("Stats = %+v, %v; want %d pending", st, err, n)
			}
			for i := range 3 {
				if d := fetchOne(ctx, t, b, "q"); d.ID != fmt.Sprint("m", i) {
					t.Fatalf("fetched %s; want m%d (FIFO)", d.ID, i)
				}
			}
		})
	}
}

// TestPublishRelistsAfterOtherBroker: a queue this broker listed, which
// another broker's Queues took out of the set for being empty, is listed
// again by this broker's next publish (the transaction lists a queue
// once per Broker, then relies on K:unlisted).
func TestPublishRelistsAfterOtherBroker(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := freshPrefix(t, rdb)
			producer := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMax: -1})
			defer producer.Close()
			operator := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, CompletedMax: -1})
			defer operator.Close()
			listed := func() bool {
				t.Helper()
				qs, err := operator.Queues(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Contains(qs, "q")
			}
			for round := range 3 {
				if err := producer.Publish(ctx, driver.Message{ID: fmt.Sprint("m", round), Queue: "q", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				if !listed() {
					t.Fatalf("queue-set promise broken: round %d, queue q with a message pending is not listed", round)
				}
				d := fetchOne(ctx, t, operator, "q")
				if errs := operator.Ack(ctx, []*driver.Delivery{d}); errs[0] != nil {
					t.Fatal(errs[0])
				}
				if listed() {
					t.Fatalf("queue-set promise broken: round %d, queue q of which nothing remains is still listed", round)
				}
			}
		})
	}
}

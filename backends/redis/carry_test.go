package redisbackend_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/internal/redisconn"
	"github.com/errand-go/errand/internal/statejson"
)

// TestLocation: the backend declares its location (driver.Located) as a
// *redisconn.States of its own client, prefix and ResultExpiry, the same
// value on every call, and its states live where that location says —
// the layout errand's Redis broker writes and reads when it co-locates
// with the backend: one key per task, StateKey(id), holding the state's
// statejson encoding, with the ResultExpiry as its TTL.
func TestLocation(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: "errand-test-location", ResultExpiry: time.Minute})
			loc, ok := b.Location().(*redisconn.States)
			if !ok || loc == nil {
				t.Fatalf("Location() = %T; want a *redisconn.States", b.Location())
			}
			if loc != b.Location() {
				t.Fatal("Location() answered two values; want the same on every call")
			}
			if loc.Client != rdb || loc.Prefix != "errand-test-location" || loc.Expiry != time.Minute {
				t.Fatalf("Location() = %+v; want the backend's client, prefix and expiry", loc)
			}
			st := &errand.TaskState{TaskUUID: rand.Text(), TaskName: "t", State: errand.StateStarted, Attempt: 1, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
			if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{st})...); err != nil {
				t.Fatal(err)
			}
			raw, err := rdb.Get(ctx, loc.StateKey(st.TaskUUID)).Result()
			if err != nil {
				t.Fatalf("the state is not at the location's StateKey: %v", err)
			}
			want, _ := statejson.Marshal(st)
			if raw != string(want) {
				t.Fatalf("state stored as %s; want the statejson encoding %s", raw, want)
			}
			if ttl := rdb.PTTL(ctx, loc.StateKey(st.TaskUUID)).Val(); ttl <= 0 || ttl > time.Minute {
				t.Fatalf("state stored with TTL %v; want the location's Expiry of 1m", ttl)
			}
		})
	}
}

package redisbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// noticeBound bounds each wait for a notice: a hang, not a latency.
const noticeBound = 20 * time.Second

// listen starts b listening for cancel notices and returns the channel
// that receives them.
func listen(ctx context.Context, t *testing.T, b *redisbroker.Broker) <-chan []string {
	t.Helper()
	got := make(chan []string, 16)
	if err := b.ListenCancel(ctx, func(ids []string) { got <- ids }); err != nil {
		t.Fatalf("ListenCancel: %v", err)
	}
	return got
}

// next returns the next notice of got, failing after noticeBound.
func next(t *testing.T, got <-chan []string, who string) []string {
	t.Helper()
	select {
	case ids := <-got:
		return ids
	case <-time.After(noticeBound):
		t.Fatalf("cancel notice promise broken: %s heard no notice within %v", who, noticeBound)
		return nil
	}
}

// TestCancelNotices: on a single node, on a cluster and, where the
// environment names one (ERRAND_REDIS_SENTINEL_ADDRS), through Sentinel,
// one NotifyCancel
// reaches every listener of the broker's prefix — whichever node its
// client subscribed on — with the UUIDs in order, and no listener of
// another prefix; a listener whose ctx ended, and one whose broker was
// closed, hears nothing more; a closed broker refuses both calls.
func TestCancelNotices(t *testing.T) {
	deployments := servers(t)
	if addrs, master := os.Getenv("ERRAND_REDIS_SENTINEL_ADDRS"), os.Getenv("ERRAND_REDIS_SENTINEL_MASTER"); addrs != "" && master != "" {
		rdb := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: master, SentinelAddrs: strings.Split(addrs, ",")})
		t.Cleanup(func() { rdb.Close() })
		deployments["Sentinel"] = rdb
	}
	for name, rdb := range deployments {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := "errand-notice-" + rand.Text()[:8]
			a := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			other := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix + "-other"})
			sender := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			for _, br := range []*redisbroker.Broker{a, b, other, sender} {
				t.Cleanup(func() { br.Close() })
			}
			actx, stopA := context.WithCancel(ctx)
			defer stopA()
			gotA, gotB, gotOther := listen(actx, t, a), listen(ctx, t, b), listen(ctx, t, other)

			ids := []string{"task-1", "task-2", `a "quoted" \ task`}
			if err := sender.NotifyCancel(ctx, ids); err != nil {
				t.Fatalf("NotifyCancel: %v", err)
			}
			for who, got := range map[string]<-chan []string{"a listener": gotA, "a second listener": gotB} {
				if n := next(t, got, who); !slices.Equal(n, ids) {
					t.Fatalf("cancel notice promise broken: %s heard %q; want %q", who, n, ids)
				}
			}
			// The other prefix's first notice is its own, sent after.
			if err := other.NotifyCancel(ctx, []string{"other-task"}); err != nil {
				t.Fatal(err)
			}
			if n := next(t, gotOther, "another prefix's listener"); !slices.Equal(n, []string{"other-task"}) {
				t.Fatalf("cancel notice promise broken: a listener of another prefix heard %q first; want only its own prefix's notices", n)
			}

			// a's ctx ends, then b's broker closes: neither hears again.
			stopA()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := sender.NotifyCancel(ctx, []string{"after"}); err != nil {
				t.Fatal(err)
			}
			gotC := listen(ctx, t, sender) // a listener that hears what follows
			if err := sender.NotifyCancel(ctx, []string{"marker"}); err != nil {
				t.Fatal(err)
			}
			if n := next(t, gotC, "a listener started after"); !slices.Equal(n, []string{"marker"}) {
				t.Fatalf("cancel notice promise broken: a listener started after a notice heard %q first; want only what was sent after it listened", n)
			}
			for who, got := range map[string]<-chan []string{"a listener whose ctx ended": gotA, "a closed broker's listener": gotB} {
				select {
				case n := <-got:
					t.Errorf("cancel notice promise broken: %s heard %q", who, n)
				default:
				}
			}
			if err := b.ListenCancel(ctx, func([]string) {}); !errors.Is(err, driver.ErrClosed) {
				t.Errorf("ListenCancel on a closed broker: %v; want ErrClosed", err)
			}
			if err := b.NotifyCancel(ctx, ids); !errors.Is(err, driver.ErrClosed) {
				t.Errorf("NotifyCancel on a closed broker: %v; want ErrClosed", err)
			}
		})
	}
}

// TestCancelListenerReconnects: a listener whose connection the server
// dropped (CLIENT KILL, on a private redis-server) subscribes again on
// its own and hears later notices; Close then ends it.
func TestCancelListenerReconnects(t *testing.T) {
	addr, _ := redistest.PrivateServer(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-reconnect"})
	defer b.Close()
	got := listen(ctx, t, b)
	if n, err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d killed, %v; want the listener's connection", n, err)
	}
	// Notices sent while it is away are lost: send until one is heard.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(noticeBound)
	for heard := false; !heard; {
		if err := b.NotifyCancel(ctx, []string{"again"}); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-got:
			if !slices.Equal(n, []string{"again"}) {
				t.Fatalf("heard %q; want [again]", n)
			}
			heard = true
		case <-tick.C:
		case <-deadline:
			t.Fatalf("cancel notice promise broken: a listener whose connection was killed heard nothing within %v (it must subscribe again on its own)", noticeBound)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCarrySettleOverCancel: one carried settle (one round trip) of four
// deliveries: a task CANCELLED in the backend's layout, one CANCELLED in
// another layout (keys in another order, a name JSON escapes), one
// RECEIVED whose error text names the word, and one STARTED. The
// cancelled tasks keep their state and answer ErrCancelled, their
// deliveries acked all the same; the other two are written SUCCESS and
// acked.
func TestCarrySettleOverCancel(t *testing.T) {
	rdb, c, b, be, _ := carrySetup(t, "Single")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	carry := carrySettle(b, be)
	queue := "settle-cancel-" + rand.Text()[:8]
	// Warm up: the server caches the script.
	if err := b.Publish(ctx, driver.Message{ID: "w", Queue: queue, Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	if errs := carry(ctx, []*driver.Delivery{fetchOne(ctx, t, b, queue)}, []*driver.TaskState{{TaskUUID: "w-" + rand.Text(), State: driver.StateSuccess}}); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	created := time.Now().UTC().Truncate(time.Millisecond)
	stored := []string{
		`{"task_uuid":"%s","task_name":"t","state":"CANCELLED","attempt":1,"error":"errand: task cancelled","error_kind":"cancelled","created_at":"` + created.Format(time.RFC3339Nano) + `"}`,
		`{"attempt":1,"created_at":"` + created.Format(time.RFC3339Nano) + `","error":"x","state":"CANCELLED","task_name":"a\"b\\c","task_uuid":"%s"}`,
		`{"task_uuid":"%s","task_name":"t","state":"RECEIVED","attempt":1,"error":"not CANCELLED","created_at":"` + created.Format(time.RFC3339Nano) + `"}`,
		`{"task_uuid":"%s","task_name":"t","state":"STARTED","attempt":1,"created_at":"` + created.Format(time.RFC3339Nano) + `"}`,
	}
	var ds []*driver.Delivery
	var sts []*driver.TaskState
	for _, raw := range stored {
		id := rand.Text()
		if err := rdb.Set(ctx, be.key(id), strings.Replace(raw, "%s", id, 1), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, driver.Message{ID: id, Queue: queue, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		d := fetchOne(ctx, t, b, queue)
		if d.ID != id {
			t.Fatalf("fetched %s; want %s", d.ID, id)
		}
		ds = append(ds, d)
		sts = append(sts, &driver.TaskState{TaskUUID: id, TaskName: "t", State: driver.StateSuccess, Attempt: 1, CreatedAt: created})
	}
	c.reset()
	errs := carry(ctx, ds, sts)
	if n := c.singles.Load() + c.pipes.Load(); n != 1 {
		t.Errorf("a carried settle of %d deliveries made %d round trips; want 1 (the check of a cancel is inside the script)", len(ds), n)
	}
	if len(errs) != len(ds) {
		t.Fatalf("carried settle answered %v; want one error per delivery", errs)
	}
	for i, want := range []driver.State{driver.StateCancelled, driver.StateCancelled, driver.StateSuccess, driver.StateSuccess} {
		got := be.state(ctx, t, ds[i].ID)
		switch {
		case want == driver.StateCancelled && !errors.Is(errs[i], driver.ErrCancelled):
			t.Errorf("delivery %d (stored %s): the carried settle answered %v; want ErrCancelled", i, stored[i], errs[i])
		case want == driver.StateSuccess && errs[i] != nil:
			t.Errorf("delivery %d (stored %s): the carried settle answered %v; want nil", i, stored[i], errs[i])
		case got != want:
			t.Errorf("delivery %d (stored %s): after the carried settle of SUCCESS the task is %s; want %s (a cancel is never overwritten)", i, stored[i], got, want)
		}
	}
	if st, err := b.Stats(ctx, queue); err != nil || st.InFlight != 0 || st.Pending != 0 {
		t.Errorf("queue after the carried settle: %+v, %v; want every delivery acked, the cancelled ones too", st, err)
	}
}

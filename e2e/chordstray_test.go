package e2e_test

// Issue 31, item 7: on the Redis broker and the Redis backend on one Redis
// (every carried path on: PENDING with the publish, STARTED in the fetch,
// SUCCESS with the ack), messages that name a chord's group and callback
// but are not its members never move the callback, however they arrive
// and however they race the worker's slots.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// strayForms are the ways a stray reaches the queue: SendTask of another
// producer's errand (its PENDING carried with the publish, its message
// named for a start in the fetch), a publish straight through the broker
// (no task name in the message: started by the backend's Start), and
// foreign text pushed onto the due list (no PENDING, no envelope).
var strayForms = []string{"send", "publish", "foreign"}

// TestChordStraysNeverMoveTheCallback repeats the report's scenario —
// a worker with 4 slots, a chord of 3 members each blocked in its handler,
// then 3 messages naming the chord's GroupUUID, GroupTaskCount 3 and its
// ChordCallback under UUIDs that are not members — 96 times, 8 at a time,
// each on its own key prefix. Once the strays have run and settled (each
// reported as driver.ErrNotMember, acked, the queue holding only the
// members), the callback must still be PENDING; released, the members
// fire it once, with their results in group order.
func TestChordStraysNeverMoveTheCallback(t *testing.T) {
	t.Parallel()
	u := os.Getenv("ERRAND_REDIS_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL is not set (scripts/services start exports it)")
		return
	}
	o, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	rdb := goredis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = rdb.Ping(ctx).Err()
	cancel()
	if err != nil {
		conformance.ServiceUnavailable(t, "Redis unreachable: "+err.Error())
		return
	}
	const rounds, parallel = 96, 8
	run := "errand-e2e-strays-" + rand.Text()[:8]
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range rounds {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			form := strayForms[i%len(strayForms)]
			if err := strayRound(rdb, fmt.Sprintf("%s-%d", run, i), form); err != nil {
				failed.Add(1)
				t.Errorf("member-only count promise broken (round %d, strays by %s): %v", i, form, err)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Logf("%d of %d rounds failed", n, rounds)
	}
}

// strayRound runs the scenario once on its own prefix and says how the
// promise broke, or returns nil.
func strayRound(rdb *goredis.Client, prefix, form string) (err error) {
	defer dropPrefix(rdb, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix})
	defer br.Close()
	defer be.Close()
	const queue = "q"
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be, DefaultQueue: queue})
	if err != nil {
		return err
	}
	started := make(chan string, 3)
	release := make(chan struct{})
	srv.Register("hold", func(ctx context.Context, s string) (string, error) {
		started <- s
		select {
		case <-release:
			return s, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	srv.Register("stray", func() (string, error) { return "stray", nil })
	var calls atomic.Int32
	srv.Register("gather", func(xs ...string) (string, error) { calls.Add(1); return strings.Join(xs, ","), nil })
	var mu sync.Mutex
	refused := map[string]bool{} // strays reported as not members
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, ErrorHandler: func(err error) {
		if errors.Is(err, driver.ErrNotMember) {
			mu.Lock()
			defer mu.Unlock()
			for _, f := range strings.Fields(err.Error()) {
				refused[strings.Trim(f, "()")] = true
			}
		}
	}})
	w.Start()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer func() {
		unblock()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if serr := w.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("worker shutdown: %w", serr)
		}
	}()

	g, _ := errand.NewGroup(errand.NewSignature("hold", "a"), errand.NewSignature("hold", "b"), errand.NewSignature("hold", "c"))
	ch, _ := errand.NewChord(g, errand.NewSignature("gather"))
	r, err := srv.SendChord(ctx, ch)
	if err != nil {
		return err
	}
	cb := r.Callback.Signature.UUID
	for range 3 {
		select {
		case <-started:
		case <-ctx.Done():
			return errors.New("the chord's 3 members did not all start")
		}
	}
	strays := make([]string, 3)
	for i := range strays {
		s := errand.NewSignature("stray")
		s.RoutingKey, s.GroupUUID, s.GroupTaskCount, s.ChordCallback = queue, g.GroupUUID, 3, ch.Callback.Copy()
		strays[i] = s.UUID
		body, err := errand.EncodeSignature(s)
		if err != nil {
			return err
		}
		switch form {
		case "send":
			_, err = srv.SendTask(ctx, s)
		case "publish":
			if err = errors.Join(be.SetStates(ctx, []*errand.TaskState{{TaskUUID: s.UUID, TaskName: s.Name, State: errand.StatePending, Attempt: 1, CreatedAt: time.Now().UTC()}})...); err == nil {
				err = br.Publish(ctx, errand.Message{ID: s.UUID, Queue: queue, Body: body})
			}
		case "foreign":
			err = rdb.LPush(ctx, "{"+prefix+":"+queue+"}:pending", body).Err()
		}
		if err != nil {
			return fmt.Errorf("send stray %d: %w", i, err)
		}
	}

	// Poll until the strays have run and settled, or the callback moved.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := be.GetState(ctx, cb)
		if err != nil || st.State != errand.StatePending {
			return fmt.Errorf("the chord callback is %s, %v while all 3 members are still running, after 3 strays naming group %s under UUIDs that are not its members; want PENDING (a group counts only its own members)", describe(st), err, g.GroupUUID)
		}
		if settled(ctx, srv, be, queue, strays, func(id string) bool { mu.Lock(); defer mu.Unlock(); return refused[id] }) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("the 3 strays naming group %s were not all run, reported as driver.ErrNotMember and acked within 30s", g.GroupUUID)
		}
	}
	if st, err := be.GetState(ctx, cb); err != nil || st.State != errand.StatePending {
		return fmt.Errorf("the chord callback is %s, %v after the strays settled, its members still running; want PENDING", describe(st), err)
	}
	unblock()
	var got string
	if err := r.Callback.GetInto(ctx, &got); err != nil || got != "a,b,c" {
		return fmt.Errorf("after the members finished the chord callback ended %q, %v; want %q, their results in group order", got, err, "a,b,c")
	}
	if k := calls.Load(); k != 1 {
		return fmt.Errorf("the chord callback ran %d times; want once", k)
	}
	return nil
}

// settled reports whether every stray ran (SUCCESS), was reported as not a
// member, and was acked: the queue holds nothing but the 3 members in
// flight.
func settled(ctx context.Context, srv *errand.Server, be errand.Backend, queue string, strays []string, refused func(string) bool) bool {
	for _, id := range strays {
		st, err := be.GetState(ctx, id)
		if err != nil || st.State != errand.StateSuccess || !refused(id) {
			return false
		}
	}
	q, err := srv.Queue(ctx, queue)
	return err == nil && q.Stats.Pending == 0 && q.Stats.Delayed == 0 && q.Stats.InFlight == 3
}

func describe(st *errand.TaskState) string {
	if st == nil {
		return "gone"
	}
	return string(st.State)
}

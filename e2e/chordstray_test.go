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

// strayForms are the strays a buggy or hostile producer makes, and how
// they reach the queue. Members-in-name (a fresh UUID naming the chord's
// group and callback): SendTask of another producer's errand (its PENDING
// carried with the publish, its message named for a start in the
// fetch), a publish straight through the broker (no task name in the
// message: started by the backend's Start), and foreign text pushed onto
// the due list (no PENDING, no envelope). Then:
//
//   - unmade-group: a fresh UUID naming a group the backend never had
//     and the chord's callback, by SendTask (the missing group must not
//     fail a callback whose state says its group cannot be gone);
//   - self-callback-*: the callback's own signature copied into the group
//     (its UUID and name, GroupUUID, ChordCallback naming itself), by
//     SendTask (refused), as foreign text, and published under the
//     callback's UUID with and without its task name in the message (the
//     fetch then begins the callback itself);
//   - wrong-id: a fresh stray published under the callback's UUID and
//     task name (the fetch begins the callback, which the body is not).
var strayForms = []string{"send", "publish", "foreign", "unmade-group",
	"self-callback-send", "self-callback-foreign", "self-callback-publish", "self-callback-task", "wrong-id"}

// strayKind is how a worker settles a stray of form: run and reported as
// not counted (ErrNotMember, or ErrGroupNotFound for a group it never
// had), set aside undecided (ErrUUIDConflict), or refused by SendTask.
func strayKind(form string) error {
	switch form {
	case "unmade-group":
		return driver.ErrGroupNotFound
	case "self-callback-send":
		return nil
	case "self-callback-foreign", "self-callback-publish", "self-callback-task", "wrong-id":
		return errand.ErrUUIDConflict
	}
	return driver.ErrNotMember
}

// flickers reports whether the fetch of a stray of form begins the
// callback itself (the message's ID and task name are the callback's):
// the worker then finds that the body is not that task and puts the
// callback's state back, so the callback may be STARTED for the moment
// between the two (a broker starts by the message's ID and name, not by
// its body). Such a round checks the callback once the strays settled.
func flickers(form string) bool { return form == "self-callback-task" || form == "wrong-id" }

// TestChordStraysNeverMoveTheCallback repeats the report's scenario —
// a worker with 4 slots, a chord of 3 members each blocked in its handler,
// then 3 messages naming the chord's group (or a group never made) and
// its ChordCallback that are not its members — 144 times, 8 at a time,
// each on its own key prefix, in every stray form. Once the strays have
// settled (run and reported as not counted, or set aside; acked, the
// queue holding only the members), the callback must still be PENDING;
// released, the members fire it once, with their results in group order.
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
	const rounds, parallel = 144, 8
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
	want := strayKind(form)
	var mu sync.Mutex
	refused := map[string]bool{} // words of the reports of strays settled as want says
	setAside := 0                // reports of strays set aside
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 4, ErrorHandler: func(err error) {
		if want == nil || !errors.Is(err, want) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(err.Error(), "errand: set aside: ") {
			setAside++
		}
		for _, f := range strings.Fields(err.Error()) {
			refused[strings.Trim(f, "()")] = true
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
		if strings.HasPrefix(form, "self-callback") {
			s = ch.Callback.Copy()
		}
		s.RoutingKey, s.GroupUUID, s.GroupTaskCount, s.ChordCallback = queue, g.GroupUUID, 3, ch.Callback.Copy()
		if form == "unmade-group" {
			s.GroupUUID = errand.NewSignature("stray").UUID // a fresh UUID
		}
		strays[i] = s.UUID
		body, err := errand.EncodeSignature(s)
		if err != nil {
			return err
		}
		switch form {
		case "send", "unmade-group":
			_, err = srv.SendTask(ctx, s)
		case "self-callback-send":
			if _, err = srv.SendTask(ctx, s); !errors.Is(err, errand.ErrUUIDConflict) {
				return fmt.Errorf("SendTask of the chord callback's own signature naming itself as its chord callback returned %v; want an error wrapping ErrUUIDConflict, nothing sent", err)
			}
			err = nil
		case "publish":
			if err = errors.Join(be.SetStates(ctx, []*errand.TaskState{{TaskUUID: s.UUID, TaskName: s.Name, State: errand.StatePending, Attempt: 1, CreatedAt: time.Now().UTC()}})...); err == nil {
				err = br.Publish(ctx, errand.Message{ID: s.UUID, Queue: queue, Body: body})
			}
		case "self-callback-publish":
			err = br.Publish(ctx, errand.Message{ID: s.UUID, Queue: queue, Body: body})
		case "self-callback-task", "wrong-id":
			err = br.Publish(ctx, errand.Message{ID: cb, Task: "gather", TaskAttempt: 1, Queue: queue, Body: body})
		case "foreign", "self-callback-foreign":
			err = rdb.LPush(ctx, "{"+prefix+":"+queue+"}:pending", body).Err()
		}
		if err != nil {
			return fmt.Errorf("send stray %d: %w", i, err)
		}
	}

	// Poll until the strays have settled, or the callback moved.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := be.GetState(ctx, cb)
		if !flickers(form) && (err != nil || st.State != errand.StatePending) {
			return fmt.Errorf("the chord callback is %s, %v while all 3 members are still running, after 3 strays (%s) naming group %s and the callback that are not its members; want PENDING (a group counts only its own members, and a stray never moves its callback)", describe(st), err, form, g.GroupUUID)
		}
		mu.Lock()
		done := settled(ctx, srv, be, queue, form, strays, refused, setAside)
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			st, err := be.GetState(context.Background(), cb)
			return fmt.Errorf("the 3 strays (%s) naming group %s were not all settled within 30s (want each %v, acked or set aside, the queue holding only the members); the chord callback is %s, %v", form, g.GroupUUID, want, describe(st), err)
		}
	}
	if st, err := be.GetState(ctx, cb); err != nil || st.State != errand.StatePending {
		return fmt.Errorf("the chord callback is %s, %v after the strays (%s) settled, its members still running; want PENDING", describe(st), err, form)
	}
	unblock()
	var got string
	if err := r.Callback.GetInto(ctx, &got); err != nil || got != "a,b,c" {
		return fmt.Errorf("after the members finished the chord callback ended %q, %v; want %q, their results in group order (strays: %s)", got, err, "a,b,c", form)
	}
	if k := calls.Load(); k != 1 {
		return fmt.Errorf("the chord callback ran %d times; want once (strays: %s)", k, form)
	}
	return nil
}

// settled reports whether every stray of form is settled as strayKind
// says: run (SUCCESS) and reported as not counted, naming its UUID, or
// set aside (3 reports, and the archive holding them: one entry per task
// ID, so one for the 3 published under the callback's UUID); and the
// queue holds nothing but the 3 members in flight. refused and setAside
// are the reports so far.
func settled(ctx context.Context, srv *errand.Server, be errand.Backend, queue, form string, strays []string, refused map[string]bool, setAside int) bool {
	dead := 0
	switch strayKind(form) {
	case nil: // refused by SendTask: nothing was queued
	case errand.ErrUUIDConflict:
		if setAside < len(strays) {
			return false
		}
		dead = len(strays)
		if form != "self-callback-foreign" {
			dead = 1
		}
	default:
		for _, id := range strays {
			st, err := be.GetState(ctx, id)
			if err != nil || st.State != errand.StateSuccess || !refused[id] {
				return false
			}
		}
	}
	q, err := srv.Queue(ctx, queue)
	return err == nil && q.Stats.Pending == 0 && q.Stats.Delayed == 0 && q.Stats.InFlight == 3 && q.Stats.Dead == dead
}

func describe(st *errand.TaskState) string {
	if st == nil {
		return "gone"
	}
	return string(st.State)
}

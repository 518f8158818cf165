package redisbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestForeignTextIsSetAside reproduces issue 14, item 1: text pushed
// straight onto a queue's pending list (not published by errand, so with no
// stored envelope) used to be popped and dropped without a trace. It must
// be counted and listed alike before a worker runs, then handed to the
// worker, which sets it aside in the archive with a reason and tells
// its ErrorHandler.
func TestForeignTextIsSetAside(t *testing.T) {
	o := redistest.URLOptions(t)
	rdb := goredis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		conformance.ServiceUnavailable(t, "Redis unreachable: "+err.Error())
	}

	prefix := "errand-foreign-" + rand.Text()[:8]
	queue := "tasks"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), "{"+prefix+":*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	foreign := []string{
		"garbage \x00\xff not json",
		`{"UUID": "abc", "Name": "add", "Args": [`,
		`{"hello": "world", "n": [1, 2, 3]}`,
	}
	pending := "{" + prefix + ":" + queue + "}:pending"
	for _, f := range foreign {
		if err := rdb.LPush(ctx, pending, f).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// And one on the delayed set, due at once (score 0 ms).
	delayed := "{" + prefix + ":" + queue + "}:delayed"
	if err := rdb.ZAdd(ctx, delayed, goredis.Z{Score: 0, Member: "delayed garbage"}).Err(); err != nil {
		t.Fatal(err)
	}
	foreign = append(foreign, "delayed garbage")

	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	t.Cleanup(func() { b.Close() })
	st, err := b.Stats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := b.List(ctx, queue, driver.ListPending, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	late, err := b.List(ctx, queue, driver.ListScheduled, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != len(foreign)-1 || len(listed) != st.Pending || st.Delayed != 1 || len(late) != 1 {
		t.Errorf("inspection promise broken: with %d foreign entries on the pending list and 1 on the delayed set, Stats counts %d pending, %d delayed and List lists %d pending, %d scheduled; both must count every entry a worker will take", len(foreign)-1, st.Pending, st.Delayed, len(listed), len(late))
	}
	for _, m := range append(listed, late...) {
		if !contains(foreign, string(m.Body)) {
			t.Errorf("inspection promise broken: List lists a pending body %q that is none of the foreign texts pushed", m.Body)
		}
	}

	be := memorybackend.New(nil)
	t.Cleanup(func() { be.Close() })
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: be, DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Register("ok", func() (string, error) { return "alive", nil }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{queue: 1}, Concurrency: 2, ErrorHandler: func(err error) {
		if errors.Is(err, errand.ErrBadMessage) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		}
	}})
	w.Start()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		w.Shutdown(sctx)
	})

	r, err := srv.SendTask(ctx, errand.NewSignature("ok"))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := r.GetInto(ctx, &s); err != nil || s != "alive" {
		t.Fatalf("bad input promise broken: the worker did not go on after foreign text on its queue: %q, %v", s, err)
	}

	// Poll, with a deadline, for the archive to hold every foreign text.
	var dl []driver.ArchiveEntry
	deadline := time.Now().Add(10 * time.Second)
	for {
		if dl, err = setAside(ctx, b, queue); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(reported)
		mu.Unlock()
		if len(dl) >= len(foreign) && n >= len(foreign) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing vanishes promise broken: of %d foreign texts popped from the pending list, %d are in the archive (%+v) and the ErrorHandler saw %d bad messages; each must be set aside with a reason and reported", len(foreign), len(dl), dl, n)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
	for _, f := range foreign {
		found := false
		for _, d := range dl {
			if string(d.Body) == f {
				found = true
				if d.Reason == "" || d.ID == "" {
					t.Errorf("nothing vanishes promise broken: foreign text %q is in the archive without an ID or a reason: %+v", f, d)
				}
			}
		}
		if !found {
			t.Errorf("nothing vanishes promise broken: foreign text %q is not in the archive with its body: %+v", f, dl)
		}
	}
	// The real task's result is stored before its ack: poll until the ack.
	for {
		if st, err = b.Stats(ctx, queue); err != nil {
			t.Fatal(err)
		}
		if st.Pending == 0 && st.Delayed == 0 && st.InFlight == 0 && st.Dead == len(foreign) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats promise broken: after the foreign texts were set aside Stats says %+v; want nothing pending, delayed or in flight and %d dead", st, len(foreign))
		}
		timer := time.NewTimer(20 * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

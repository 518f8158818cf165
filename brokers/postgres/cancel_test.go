package postgresbroker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// noticeBound bounds the wait for a notice that should come: generous,
// only against a hang.
const noticeBound = 10 * time.Second

// notices collects what a ListenCancel's notify is given.
type notices struct {
	mu   sync.Mutex
	ids  []string
	more chan struct{} // a value after each notice
}

func newNotices() *notices { return &notices{more: make(chan struct{}, 1)} }

func (n *notices) notify(ids []string) {
	n.mu.Lock()
	n.ids = append(n.ids, ids...)
	n.mu.Unlock()
	select {
	case n.more <- struct{}{}:
	default:
	}
}

func (n *notices) got() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.ids)
}

// waitFor waits until n holds every id of want, or fails.
func (n *notices) waitFor(t *testing.T, what string, want ...string) {
	t.Helper()
	timer := time.NewTimer(noticeBound)
	defer timer.Stop()
	for {
		got := n.got()
		if !slices.ContainsFunc(want, func(id string) bool { return !slices.Contains(got, id) }) {
			return
		}
		select {
		case <-n.more:
		case <-timer.C:
			t.Fatalf("%s: heard %d of the %d UUIDs notified within %v (driver.CancelNotifier)", what, len(got), len(want), noticeBound)
		}
	}
}

// NotifyCancel reaches every broker listening on the schema, once per
// UUID, however many UUIDs (several notices' worth), and no broker of
// another schema; a ListenCancel whose ctx ended hears nothing more;
// after Close both answer ErrClosed.
func TestCancelNotices(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema, other := pgdbtest.Schema(t, pool), pgdbtest.Schema(t, pool)
	open := func(schema string) *postgresbroker.Broker {
		b, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	listener, sender, stranger := open(schema), open(schema), open(other)
	heard, ended, foreign := newNotices(), newNotices(), newNotices()
	if err := listener.ListenCancel(ctx, heard.notify); err != nil {
		t.Fatalf("ListenCancel: %v", err)
	}
	endCtx, end := context.WithCancel(ctx)
	if err := listener.ListenCancel(endCtx, ended.notify); err != nil {
		t.Fatal(err)
	}
	if err := stranger.ListenCancel(ctx, foreign.notify); err != nil {
		t.Fatal(err)
	}

	var many []string
	for i := range 600 { // about 23 KB of UUIDs: several notices
		many = append(many, fmt.Sprintf("task-%04d-f47ac10b-58cc-4372-a567", i))
	}
	if err := sender.NotifyCancel(ctx, many); err != nil {
		t.Fatalf("NotifyCancel: %v", err)
	}
	heard.waitFor(t, "a broker of the schema", many...)
	ended.waitFor(t, "a second ListenCancel of the broker", many...)
	if got := heard.got(); len(got) != len(many) {
		t.Errorf("heard %d UUIDs for %d notified; want each once", len(got), len(many))
	}

	// A ListenCancel whose ctx ended hears nothing more: the next notice
	// reaches the live one (one connection, notices in order), not it.
	end()
	before := len(ended.got())
	if err := sender.NotifyCancel(ctx, []string{"after-end"}); err != nil {
		t.Fatal(err)
	}
	heard.waitFor(t, "the live ListenCancel", "after-end")
	if got := ended.got(); len(got) != before {
		t.Errorf("a ListenCancel whose ctx ended heard %v; want nothing more", got[before:])
	}
	if got := foreign.got(); len(got) != 0 {
		t.Errorf("a broker of another schema heard %d UUIDs; want none (one channel per schema)", len(got))
	}

	listener.Close()
	if err := listener.ListenCancel(ctx, heard.notify); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("ListenCancel after Close = %v; want ErrClosed", err)
	}
	if err := listener.NotifyCancel(ctx, []string{"x"}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("NotifyCancel after Close = %v; want ErrClosed", err)
	}
}

// The listening connection comes back after the server ends it, and
// ListenCancel's notices with it (those sent while it was away are lost:
// the sender sends until one is heard).
func TestCancelNoticesAfterReconnect(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	listener, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	heard := newNotices()
	if err := listener.ListenCancel(ctx, heard.notify); err != nil {
		t.Fatal(err)
	}
	// End the listener's session: the backend whose last statement
	// listened on this schema's cancel channel.
	var ended int
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND query LIKE 'LISTEN %errand_cancel:' || $1 || '%'`, schema).Scan(&ended); err != nil || ended != 1 {
		t.Fatalf("terminate the listening session: %d ended, %v; want 1", ended, err)
	}
	deadline := time.Now().Add(noticeBound)
	for i := 0; ; i++ {
		id := fmt.Sprintf("after-reconnect-%d", i)
		if err := listener.NotifyCancel(ctx, []string{id}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard.more:
			if got := heard.got(); slices.ContainsFunc(got, func(s string) bool { return len(s) > 16 && s[:16] == "after-reconnect-" }) {
				return
			}
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cancel notice heard within %v of the listening session ending; want the listener back", noticeBound)
		}
	}
}

package postgresbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// waitBound is how long a woken waiter may take here: far below the
// PollInterval of an hour these tests set, so only a wake-up meets it.
const waitBound = 10 * time.Second

// waitFor starts WaitState for a terminal state of id and returns its
// answer's channel.
func waitFor(b errand.Backend, id string) <-chan error {
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		st, err := b.(driver.StateWaiter).WaitState(ctx, id, func(st *driver.TaskState) bool { return st.State.Terminal() })
		if err == nil && st.State != driver.StateSuccess {
			err = errors.New("woken with " + string(st.State))
		}
		got <- err
	}()
	return got
}

func set(t *testing.T, b errand.Backend, id string, s driver.State) {
	t.Helper()
	if err := errors.Join(b.SetStates(context.Background(), []*errand.TaskState{{TaskUUID: id, TaskName: "w", State: s, CreatedAt: time.Now()}})...); err != nil {
		t.Fatal(err)
	}
}

// A waiter is woken by the notification of the write (PollInterval is an
// hour: a waiter that only polled would still wait), a write made by
// another backend on the same schema included.
func TestWaitWokenByNotification(t *testing.T) {
	pool := pgdbtest.Pool(t)
	h := harness(t, pool, &postgresbackend.Options{PollInterval: time.Hour})
	waiter, writer := h.New(t, 0), h.New(t, 0)
	for i, id := range []string{"first", "second"} {
		set(t, writer, id, driver.StateStarted)
		got := waitFor(waiter, id)
		set(t, writer, id, driver.StateSuccess)
		if err := <-got; err != nil {
			t.Fatalf("waiter %d: %v; want woken by the SUCCESS written by another backend within %v (its PollInterval is an hour)", i, err, waitBound)
		}
	}
	// An unknown task is an error at once.
	if _, err := waiter.(driver.StateWaiter).WaitState(context.Background(), "never", func(*driver.TaskState) bool { return true }); !errors.Is(err, driver.ErrTaskNotFound) {
		t.Fatalf("WaitState of an unknown task = %v, want ErrTaskNotFound", err)
	}
}

// A change no notification announces (a row written by hand, as when a
// notification is lost) reaches the waiter by its poll.
func TestWaitFallbackPoll(t *testing.T) {
	pool := pgdbtest.Pool(t)
	h := harness(t, pool, &postgresbackend.Options{PollInterval: 50 * time.Millisecond})
	b := h.New(t, 0)
	set(t, b, "quiet", driver.StateStarted)
	got := waitFor(b, "quiet")
	schema := locSchema(t, b.(driver.Located).Location())
	st, _ := b.GetState(context.Background(), "quiet")
	st.State = driver.StateSuccess
	var a pgdb.StateArgs
	a.Append(st)
	if _, err := pool.Exec(context.Background(), "UPDATE "+pgdb.Table(schema, "states")+" SET state = 'SUCCESS', body = $1 WHERE id = 'quiet'", a.Bodies[0]); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a change without a notification: %v; want the waiter to see it by its poll", err)
	}
}

// The listening connection, terminated by the server, is opened again,
// and the waiters re-read then: a write made while it was down still
// wakes them, long before their hour-long poll.
func TestWaitListenerReconnects(t *testing.T) {
	ctx := context.Background()
	pool := pgdbtest.Pool(t)
	h := harness(t, pool, &postgresbackend.Options{PollInterval: time.Hour})
	b := h.New(t, 0)
	schema := locSchema(t, b.(driver.Located).Location())
	set(t, b, "a", driver.StateStarted)
	got := waitFor(b, "a")
	// Wait for the listener, then terminate it.
	listening := "LISTEN %" + pgdb.StatesChannel(schema) + "%"
	deadline := time.Now().Add(waitBound)
	for {
		var killed int
		if err := pool.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()", listening).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection LISTENing on %s within %v of a WaitState", pgdb.StatesChannel(schema), waitBound)
		}
		time.Sleep(10 * time.Millisecond) // polling for the listener with a deadline
	}
	set(t, b, "a", driver.StateSuccess)
	if err := <-got; err != nil {
		t.Fatalf("after the listening connection was terminated: %v; want the waiter woken when it is back", err)
	}
}

// Close ends a WaitState at once with driver.ErrClosed, whatever its
// PollInterval.
func TestWaitEndsOnClose(t *testing.T) {
	pool := pgdbtest.Pool(t)
	b := harness(t, pool, &postgresbackend.Options{PollInterval: time.Hour}).New(t, 0)
	set(t, b, "open", driver.StateStarted)
	got := make(chan error, 1)
	go func() {
		_, err := b.(driver.StateWaiter).WaitState(context.Background(), "open", func(st *driver.TaskState) bool { return st.State.Terminal() })
		got <- err
	}()
	// Close once the waiter is registered and has read the state: the
	// listener's LISTEN shows it is.
	deadline := time.Now().Add(waitBound)
	for !listening(t, pool, locSchema(t, b.(driver.Located).Location())) {
		if time.Now().After(deadline) {
			t.Fatalf("no listener within %v of a WaitState", waitBound)
		}
		time.Sleep(10 * time.Millisecond) // polling for the listener with a deadline
	}
	b.Close()
	select {
	case err := <-got:
		if !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("WaitState ended by Close = %v, want driver.ErrClosed", err)
		}
	case <-time.After(waitBound):
		t.Fatalf("WaitState still waiting %v after Close; want it ended with driver.ErrClosed", waitBound)
	}
}

// listening reports whether a connection LISTENs on schema's states
// channel.
func listening(t *testing.T, pool *pgxpool.Pool, schema string) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()", "LISTEN %"+pgdb.StatesChannel(schema)+"%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

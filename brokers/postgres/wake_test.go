package postgresbroker_test

// The wake-up paths the kit does not single out: a blocked Fetch is woken
// by a publish's NOTIFY (and by a commit, for a publish in a
// transaction), and at a delayed message's due time, not a poll later.
// Each broker here polls once a minute, so a Fetch that returns within
// the generous bound was woken by the path under test.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	postgresbroker "github.com/errand-go/errand/brokers/postgres"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// noPoll is a PollInterval no test outlasts: a wake-up within a test's
// bound came from a notification or a due time.
const noPoll = time.Hour

// wakeBound bounds a wake-up generously (a hang, not a latency, fails).
func wakeBound() time.Duration { return scaled(10 * time.Second) }

func scaled(d time.Duration) time.Duration {
	var s float64 = 1
	fmt.Sscan(getenv(conformance.ScaleEnv, "1"), &s)
	if s <= 0 {
		s = 1
	}
	return time.Duration(float64(d) * s)
}

func newBroker(t testing.TB, pool *pgxpool.Pool, schema string, opts postgresbroker.Options) *postgresbroker.Broker {
	t.Helper()
	opts.Schema = schema
	b, err := postgresbroker.New(context.Background(), pool, &opts)
	if err != nil {
		t.Fatalf("postgresbroker.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// blockedFetch starts a Fetch of queue and returns its answer's channel,
// once the Fetch has had time to look at the empty queue and block (a
// blocked call has no event to wait on: time passing is it).
func blockedFetch(ctx context.Context, b *postgresbroker.Broker, queue string) <-chan fetched {
	out := make(chan fetched, 1)
	go func() {
		ds, err := b.Fetch(ctx, queue, 10, time.Minute)
		out <- fetched{ds, err, time.Now()}
	}()
	timer := time.NewTimer(scaled(300 * time.Millisecond))
	defer timer.Stop()
	<-timer.C
	return out
}

type fetched struct {
	ds  []*driver.Delivery
	err error
	at  time.Time
}

func awaitFetch(t *testing.T, ch <-chan fetched, what string) fetched {
	t.Helper()
	timer := time.NewTimer(wakeBound())
	defer timer.Stop()
	select {
	case f := <-ch:
		if f.err != nil {
			t.Fatalf("%s: Fetch: %v", what, f.err)
		}
		return f
	case <-timer.C:
		t.Fatalf("wake-up promise broken: %s: a blocked Fetch was not woken within %v (the broker polls only every %v)", what, wakeBound(), noPoll)
	}
	return fetched{}
}

// TestFetchWakesOnPublish: a Fetch blocked on an empty queue returns the
// message another broker (another process, as far as the server knows)
// publishes, woken by its NOTIFY; again and again.
func TestFetchWakesOnPublish(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	consumer := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	producer := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	ctx := context.Background()
	q := "wake-" + t.Name()
	for i := range 3 {
		ch := blockedFetch(ctx, consumer, q)
		id := fmt.Sprintf("m%d", i)
		if err := producer.Publish(ctx, driver.Message{ID: id, Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		f := awaitFetch(t, ch, "publish to the queue")
		if len(f.ds) != 1 || f.ds[0].ID != id {
			t.Fatalf("woken Fetch returned %d deliveries, want %s", len(f.ds), id)
		}
		if errs := consumer.Ack(ctx, f.ds); errs != nil {
			t.Fatalf("Ack: %v", errs)
		}
	}
}

// TestFetchWakesAtDueTime: a Fetch blocked on a queue whose only message
// is delayed returns it at its due time, never before, whether the
// message was there before the Fetch looked or was published while it
// waited.
func TestFetchWakesAtDueTime(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	ctx := context.Background()
	delay := scaled(500 * time.Millisecond)
	for _, before := range []bool{true, false} {
		q := fmt.Sprintf("due-%s-%v", t.Name(), before)
		due := time.Now().Add(delay)
		m := driver.Message{ID: "later", Queue: q, Body: []byte("x"), NotBefore: due}
		var ch <-chan fetched
		if before {
			if err := b.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
			ch = blockedFetch(ctx, b, q)
		} else {
			ch = blockedFetch(ctx, b, q)
			due = time.Now().Add(delay)
			m.NotBefore = due
			if err := b.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		f := awaitFetch(t, ch, fmt.Sprintf("a message delayed %v (published before the Fetch: %v)", delay, before))
		if len(f.ds) != 1 {
			t.Fatalf("Fetch returned %d deliveries, want 1", len(f.ds))
		}
		if f.at.Before(due) {
			t.Fatalf("delay promise broken: delivered %v before its due time", due.Sub(f.at))
		}
		t.Logf("published before the Fetch: %v; delivered %v after its due time", before, f.at.Sub(due))
		b.Ack(ctx, f.ds)
	}
}

// TestFetchWakesOnCommit: a message published inside a transaction is
// not delivered before the commit, and the commit wakes a blocked Fetch
// (PostgreSQL delivers the publish's NOTIFY at commit).
func TestFetchWakesOnCommit(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	b := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	ctx := context.Background()
	q := "commit-" + t.Name()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := b.CheckTx(tx); err != nil {
		t.Fatalf("CheckTx(a pgx.Tx of the broker's pool): %v", err)
	}
	if err := b.Publish(driver.WithTx(ctx, tx), driver.Message{ID: "in-tx", Queue: q, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ch := blockedFetch(ctx, b, q)
	select {
	case f := <-ch:
		t.Fatalf("transaction promise broken: a message of an uncommitted transaction was fetched: %d deliveries, %v", len(f.ds), f.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f := awaitFetch(t, ch, "commit of a transaction that published")
	if len(f.ds) != 1 || f.ds[0].ID != "in-tx" {
		t.Fatalf("woken Fetch returned %d deliveries, want in-tx", len(f.ds))
	}
	b.Ack(ctx, f.ds)
}

// TestFetchWakesOnTrailingNotify: a publish within its broker's notify
// window of the queue's last notification is notified once the window
// ends: a consumer elsewhere, blocked with polling off, still gets it.
func TestFetchWakesOnTrailingNotify(t *testing.T) {
	pool := pgdbtest.Pool(t)
	schema := pgdbtest.Schema(t, pool)
	consumer := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	producer := newBroker(t, pool, schema, postgresbroker.Options{PollInterval: noPoll})
	window := scaled(2 * time.Second)
	postgresbroker.SetNotifyWindow(producer, window)
	ctx := context.Background()
	q := "trailing-" + t.Name()
	start := time.Now()
	for i := range 2 {
		ch := blockedFetch(ctx, consumer, q)
		id := fmt.Sprintf("m%d", i)
		if err := producer.Publish(ctx, driver.Message{ID: id, Queue: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		f := awaitFetch(t, ch, fmt.Sprintf("publish %d, %v after the first (notify window %v)", i+1, time.Since(start), window))
		if len(f.ds) != 1 || f.ds[0].ID != id {
			t.Fatalf("woken Fetch returned %d deliveries, want %s", len(f.ds), id)
		}
		consumer.Ack(ctx, f.ds)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// The PostgreSQL peers (issue 33): a raw SKIP LOCKED floor, River and
// errand's PostgreSQL broker and backend, each on a schema of its own
// (created when the subject opens, dropped when it stops) in the one
// database of ERRAND_POSTGRES_URL, each with a pool of its own. Same
// payload as the Redis peers (five int64 arguments), same no-op handler.

// A pgPeer is a peer on PostgreSQL, which can also send a batch and send
// inside the caller's transaction.
type pgPeer interface {
	peer
	// sendBatch enqueues the tasks ids from..from+count-1 in one call.
	sendBatch(ctx context.Context, from, count int) error
	// sendTx enqueues one task inside tx.
	sendTx(ctx context.Context, tx pgx.Tx, id, sent int64) error
	// db is the peer's pool and schema.
	db() (*pgxpool.Pool, string)
}

type pgSubject struct {
	name string
	open func(ctx context.Context) (pgPeer, error)
}

// pgMaxConns is each subject's pool size: 50 workers and the producers fit.
const pgMaxConns = 64

// pgOpen makes a pool on ERRAND_POSTGRES_URL and a fresh schema named
// after kind.
func pgOpen(ctx context.Context, kind string) (*pgxpool.Pool, string, error) {
	cfg, err := pgxpool.ParseConfig(os.Getenv("ERRAND_POSTGRES_URL"))
	if err != nil {
		return nil, "", err
	}
	schema := strings.ReplaceAll(strings.ToLower(token(kind)), "-", "_")
	cfg.MaxConns = pgMaxConns
	cfg.ConnConfig.Tracer = pgTrace
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		pool.Close()
		return nil, "", err
	}
	return pool, schema, nil
}

// pgClose drops the schema pgOpen made and closes the pool.
func pgClose(pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: dropping schema %s: %v\n", schema, err)
	}
	pool.Close()
}

// raw: one table, (id bigserial, payload jsonb, leased_until), and a
// statement trigger that NOTIFYs a channel of the schema's name after each
// INSERT statement. One fetcher claims up to as many tasks as there are
// free workers (UPDATE ... SET leased_until = now() + 30 s WHERE id IN
// (SELECT ... WHERE leased_until < now() ORDER BY id LIMIT n FOR UPDATE
// SKIP LOCKED) RETURNING), hands them to w worker goroutines, each of
// which runs the handler and DELETEs its row (reliable: a crashed
// worker's row is claimed again when its lease ends). When a claim finds
// nothing the fetcher waits for a notification (one LISTEN connection), 1
// s at most. The honest minimum of a hand-written queue.

type rawPGPeer struct {
	pool   *pgxpool.Pool
	schema string
	table  string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRawPGPeer(ctx context.Context) (pgPeer, error) {
	pool, schema, err := pgOpen(ctx, "raw")
	if err != nil {
		return nil, err
	}
	s := pgx.Identifier{schema}.Sanitize()
	p := &rawPGPeer{pool: pool, schema: schema, table: s + ".jobs"}
	ddl := fmt.Sprintf(`CREATE TABLE %[1]s.jobs (
	id bigserial PRIMARY KEY,
	payload jsonb NOT NULL,
	leased_until timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE FUNCTION %[1]s.notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('%[2]s', '');
	RETURN NULL;
END $$;
CREATE TRIGGER jobs_notify AFTER INSERT ON %[1]s.jobs FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.notify_jobs();
CREATE TABLE %[1]s.chord (n int NOT NULL)`, s, schema)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		pgClose(pool, schema)
		return nil, err
	}
	return p, nil
}

func (p *rawPGPeer) token() string               { return p.schema }
func (p *rawPGPeer) db() (*pgxpool.Pool, string) { return p.pool, p.schema }

func (p *rawPGPeer) send(ctx context.Context, id, sent int64) error {
	_, err := p.pool.Exec(ctx, "INSERT INTO "+p.table+" (payload) VALUES ($1)", rawPayload(id, sent))
	return err
}

func (p *rawPGPeer) sendTx(ctx context.Context, tx pgx.Tx, id, sent int64) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+p.table+" (payload) VALUES ($1)", rawPayload(id, sent))
	return err
}

// sendBatch is one multi-row INSERT (unnest of a jsonb array).
func (p *rawPGPeer) sendBatch(ctx context.Context, from, count int) error {
	vs := make([]string, count)
	for i := range vs {
		vs[i] = rawPayload(int64(from+i), 0)
	}
	_, err := p.pool.Exec(ctx, "INSERT INTO "+p.table+" (payload) SELECT unnest($1::jsonb[])", vs)
	return err
}

func (p *rawPGPeer) preload(ctx context.Context, count int) error {
	for i := 0; i < count; i += 1000 {
		if err := p.sendBatch(ctx, i, min(1000, count-i)); err != nil {
			return err
		}
	}
	return nil
}

type rawPGJob struct {
	id      int64
	payload []byte
}

func (p *rawPGPeer) start(w int, run func(id, sent int64)) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	wake := make(chan struct{}, 1)
	listening := make(chan error, 1)
	p.wg.Go(func() { p.listen(ctx, wake, listening) })
	if err := <-listening; err != nil {
		cancel()
		p.wg.Wait()
		p.cancel = nil
		return err
	}
	free := make(chan struct{}, w) // a token per idle worker
	for range w {
		free <- struct{}{}
	}
	work := make(chan rawPGJob, w)
	claim := fmt.Sprintf(`UPDATE %[1]s SET leased_until = now() + interval '30 seconds'
WHERE id IN (SELECT id FROM %[1]s WHERE leased_until < now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload`, p.table)
	ack := "DELETE FROM " + p.table + " WHERE id = $1"
	p.wg.Go(func() {
		defer close(work)
		for ctx.Err() == nil {
			select {
			case <-free:
			case <-ctx.Done():
				return
			}
			k := 1
		more:
			for k < w {
				select {
				case <-free:
					k++
				default:
					break more
				}
			}
			got := 0
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			rows, err := p.pool.Query(cctx, claim, k)
			if err == nil {
				for rows.Next() {
					var j rawPGJob
					if rows.Scan(&j.id, &j.payload) == nil {
						work <- j
						got++
					}
				}
				rows.Close()
				err = rows.Err()
			}
			cancel()
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench: raw claim: %v\n", err)
			}
			for range k - got {
				free <- struct{}{}
			}
			if got == 0 || err != nil {
				select {
				case <-wake:
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
			}
		}
	})
	for range w {
		p.wg.Go(func() {
			for j := range work {
				var a [5]int64
				if json.Unmarshal(j.payload, &a) == nil {
					run(a[0], a[1])
				}
				actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := p.pool.Exec(actx, ack, j.id); err != nil {
					fmt.Fprintf(os.Stderr, "bench: raw ack: %v\n", err)
				}
				cancel()
				free <- struct{}{}
			}
		})
	}
	return nil
}

// listen holds a connection LISTENing on the peer's channel and signals
// wake at each notification, until ctx ends.
func (p *rawPGPeer) listen(ctx context.Context, wake chan<- struct{}, listening chan<- error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		listening <- err
		return
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{p.schema}.Sanitize()); err != nil {
		listening <- err
		return
	}
	listening <- nil
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench: raw listener: %v\n", err)
				conn.Conn().Close(context.Background())
			}
			return
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

func (p *rawPGPeer) pending(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, "SELECT count(*) FROM "+p.table).Scan(&n)
	return n, err
}

func (p *rawPGPeer) stop() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
	}
	pgClose(p.pool, p.schema)
}

// River v0.51.2 with riverpgxv5: its tables made by rivermigrate in the
// peer's schema (Config.Schema), every Config field at its default except
// Queues (the default queue, MaxWorkers = the workers), Workers, Schema,
// the logger (errors only) and, for the extra latency row, FetchCooldown.
// Until the workers start, sends go through an insert-only client; after,
// through the working client (as one process that inserts and works).

type riverArgs struct {
	ID   int64 `json:"id"`
	Sent int64 `json:"sent"`
	A    int64 `json:"a"`
	B    int64 `json:"b"`
	C    int64 `json:"c"`
}

func (riverArgs) Kind() string { return "noop5" }

func newRiverArgs(id, sent int64) riverArgs { return riverArgs{id, sent, 3, 4, 5} }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	run func(id, sent int64)
}

func (w *riverWorker) Work(_ context.Context, j *river.Job[riverArgs]) error {
	w.run(j.Args.ID, j.Args.Sent)
	return nil
}

type riverPeer struct {
	pool     *pgxpool.Pool
	schema   string
	cooldown time.Duration // FetchCooldown; 0: River's default (100 ms)
	inserter *river.Client[pgx.Tx]
	worker   *river.Client[pgx.Tx]
	client   atomic.Pointer[river.Client[pgx.Tx]] // the one sends go through
}

func riverLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func newRiverPeer(ctx context.Context, cooldown time.Duration) (pgPeer, error) {
	pool, schema, err := pgOpen(ctx, "river")
	if err != nil {
		return nil, err
	}
	p := &riverPeer{pool: pool, schema: schema, cooldown: cooldown}
	fail := func(err error) (pgPeer, error) {
		pgClose(pool, schema)
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fail(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fail(fmt.Errorf("river migrate: %w", err))
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema}.Sanitize()+".chord (n int NOT NULL)"); err != nil {
		return fail(err)
	}
	p.inserter, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: riverLogger()})
	if err != nil {
		return fail(err)
	}
	p.client.Store(p.inserter)
	return p, nil
}

func (p *riverPeer) token() string               { return p.schema }
func (p *riverPeer) db() (*pgxpool.Pool, string) { return p.pool, p.schema }

func (p *riverPeer) send(ctx context.Context, id, sent int64) error {
	_, err := p.client.Load().Insert(ctx, newRiverArgs(id, sent), nil)
	return err
}

func (p *riverPeer) sendTx(ctx context.Context, tx pgx.Tx, id, sent int64) error {
	_, err := p.client.Load().InsertTx(ctx, tx, newRiverArgs(id, sent), nil)
	return err
}

// sendBatch is River's InsertMany.
func (p *riverPeer) sendBatch(ctx context.Context, from, count int) error {
	ps := make([]river.InsertManyParams, count)
	for i := range ps {
		ps[i] = river.InsertManyParams{Args: newRiverArgs(int64(from+i), 0)}
	}
	_, err := p.client.Load().InsertMany(ctx, ps)
	return err
}

// preload is River's InsertManyFast (COPY), 1000 a call.
func (p *riverPeer) preload(ctx context.Context, count int) error {
	for i := 0; i < count; i += 1000 {
		ps := make([]river.InsertManyParams, min(1000, count-i))
		for k := range ps {
			ps[k] = river.InsertManyParams{Args: newRiverArgs(int64(i+k), 0)}
		}
		if _, err := p.client.Load().InsertManyFast(ctx, ps); err != nil {
			return err
		}
	}
	return nil
}

func (p *riverPeer) start(w int, run func(id, sent int64)) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{run: run})
	c, err := river.NewClient(riverpgxv5.New(p.pool), &river.Config{
		Schema:        p.schema,
		Logger:        riverLogger(),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: w}},
		Workers:       workers,
		FetchCooldown: p.cooldown,
	})
	if err != nil {
		return err
	}
	if err := c.Start(context.Background()); err != nil {
		return err
	}
	p.worker = c
	p.client.Store(c)
	return nil
}

func (p *riverPeer) pending(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{p.schema}.Sanitize()+".river_job WHERE state = 'available'").Scan(&n)
	return n, err
}

func (p *riverPeer) stop() {
	if p.worker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := p.worker.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "bench: stopping River: %v\n", err)
		}
		cancel()
	}
	pgClose(p.pool, p.schema)
}

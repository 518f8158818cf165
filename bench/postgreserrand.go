package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand"
	postgresbackend "github.com/errand-go/errand/backends/postgres"
	postgresbroker "github.com/errand-go/errand/brokers/postgres"
)

// errand: the PostgreSQL broker and the PostgreSQL backend on one pool and
// one schema (migrated by Migrate), default options but the schema and a
// 10-minute result expiry like the Redis peers (the soak: -soakexpiry).

type errandPGPeer struct {
	errandPeer
	pool   *pgxpool.Pool
	schema string
}

func newErrandPGPeer(ctx context.Context) (pgPeer, error) { return openErrandPG(ctx, 10*time.Minute) }

func openErrandPG(ctx context.Context, expiry time.Duration) (pgPeer, error) {
	pool, schema, err := pgOpen(ctx, "errand")
	if err != nil {
		return nil, err
	}
	// One schema of errand's tables serves both drivers: the broker's
	// Migrate makes them all.
	if err := postgresbroker.Migrate(ctx, pool, schema); err != nil {
		pgClose(pool, schema)
		return nil, err
	}
	brk, err := postgresbroker.New(ctx, pool, &postgresbroker.Options{Schema: schema})
	if err != nil {
		pgClose(pool, schema)
		return nil, err
	}
	bk, err := postgresbackend.New(ctx, pool, &postgresbackend.Options{Schema: schema, ResultExpiry: expiry})
	if err != nil {
		brk.Close()
		pgClose(pool, schema)
		return nil, err
	}
	srv, err := errand.NewServer(errand.Config{Broker: brk, Backend: bk})
	if err != nil {
		brk.Close()
		bk.Close()
		pgClose(pool, schema)
		return nil, err
	}
	return &errandPGPeer{errandPeer: errandPeer{srv: srv, prefix: schema}, pool: pool, schema: schema}, nil
}

func (p *errandPGPeer) db() (*pgxpool.Pool, string) { return p.pool, p.schema }

func (p *errandPGPeer) sendTx(ctx context.Context, tx pgx.Tx, id, sent int64) error {
	_, err := p.srv.SendTask(errand.WithTx(ctx, tx), errandSig(id, sent))
	return err
}

// sendBatch is one SendGroup of count tasks.
func (p *errandPGPeer) sendBatch(ctx context.Context, from, count int) error {
	sigs := make([]*errand.Signature, count)
	for i := range sigs {
		sigs[i] = errandSig(int64(from+i), 0)
	}
	g, err := errand.NewGroup(sigs...)
	if err != nil {
		return err
	}
	_, err = p.srv.SendGroup(ctx, g)
	return err
}

// pending counts the broker's message rows: before the workers start,
// every one is pending.
func (p *errandPGPeer) pending(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{p.schema, "messages"}.Sanitize()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting errand's messages: %w", err)
	}
	return n, nil
}

func (p *errandPGPeer) stop() {
	p.errandPeer.stop()
	p.srv.Close()
	pgClose(p.pool, p.schema)
}

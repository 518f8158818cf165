package pgdbtest_test

import (
	"context"
	"testing"

	"github.com/errand-go/errand/internal/pgdb/pgdbtest"
)

// A private server keeps what was committed across Stop and Start, and
// its pool recovers.
func TestPrivateServerRestarts(t *testing.T) {
	ctx := context.Background()
	url, server := pgdbtest.PrivateServer(t)
	pool := pgdbtest.Connect(t, url)
	if _, err := pool.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	server.Stop(t)
	server.Start(t)
	// The pool's connections from before the restart fail once each
	// (terminated by the shutdown); the pool replaces them.
	var v int
	var err error
	for range 20 {
		if err = pool.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err == nil {
			break
		}
	}
	if err != nil || v != 42 {
		t.Fatalf("after a restart: v=%d err=%v, want 42", v, err)
	}
}

// Package pgdbtest is what the PostgreSQL drivers' tests share: the shared
// server of ERRAND_POSTGRES_URL, a schema of a test's own on it, and a
// private server for the tests that must stop, restart or silence one. For
// tests only.
//
// A test that needs a server it cannot reach skips, or fails when
// ERRAND_REQUIRE_SERVICES=1 (conformance.ServiceUnavailable).
package pgdbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/pgdb"
)

// URL returns ERRAND_POSTGRES_URL: the shared server's database, where the
// test's user may create schemas.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("ERRAND_POSTGRES_URL")
	if u == "" {
		conformance.ServiceUnavailable(t, "ERRAND_POSTGRES_URL is not set (scripts/services start exports it)")
	}
	return u
}

// Pool returns a pool on the shared server (ERRAND_POSTGRES_URL), closed
// when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Connect(t, URL(t))
}

// Connect returns a pool on url, pinged, closed when t ends.
func Connect(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		conformance.ServiceUnavailable(t, "PostgreSQL unreachable: "+err.Error())
	}
	return pool
}

// Schema returns the name of a new schema of t's own on pool's database,
// migrated to pgdb.Version, dropped (with everything in it) when t ends.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := EmptySchema(t, pool)
	if err := pgdb.Migrate(context.Background(), pool, name); err != nil {
		t.Fatalf("migrate schema %s: %v", name, err)
	}
	return name
}

// EmptySchema returns a fresh schema name of t's own, not created (for
// tests of migration itself), dropped if it exists when t ends.
func EmptySchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "errand_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// PrivateServer starts a PostgreSQL server of t's own: a new cluster
// (initdb, superuser errand trusted on 127.0.0.1, database errand) in a
// directory of t's own, listening on a free port of 127.0.0.1. It returns
// the database's URL and the process: Stop is a fast shutdown (sessions
// ended, everything committed kept), Start starts it again on the same
// data. Never Kill it: an immediate shutdown at t's end stops it
// whatever state it is in. Run as root, the server runs as the postgres
// user of Debian's package, as PostgreSQL refuses root.
func PrivateServer(t testing.TB) (string, *conformance.ServerProcess) {
	t.Helper()
	bin := binDir(t)
	dir := t.TempDir()
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			conformance.ServiceUnavailable(t, "running as root and no postgres user to run PostgreSQL as: "+err.Error())
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The postgres user must reach the directory: t.TempDir's parents
		// are 0700 to others.
		for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
		os.Chown(dir, uid, gid)
	}
	data, sock := filepath.Join(dir, "data"), dir
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "errand", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	addr := conformance.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	t.Cleanup(func() {
		stop := exec.Command(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
		stop.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		stop.Run() // nothing to stop is fine
	})
	url := fmt.Sprintf("postgres://errand@%s/errand", addr)
	ready := func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://errand@%s/postgres", addr))
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, "SELECT 1 FROM pg_database WHERE datname = 'errand'")
		return err
	}
	server := conformance.StartServerProcess(t, func() *exec.Cmd {
		c := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", port,
			"-k", sock, "-c", "listen_addresses="+host, "-c", "fsync=off", "-c", "max_connections=100")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		// A killed postmaster's children hold its output a moment more.
		c.WaitDelay = 5 * time.Second
		return c
	}, ready)
	server.StopSignal = syscall.SIGINT // a fast shutdown: sessions ended
	create := exec.Command(filepath.Join(bin, "createdb"), "-h", sock, "-p", port, "-U", "errand", "errand")
	create.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("createdb: %v\n%s", err, out)
	}
	return url, server
}

// binDir is the newest installed PostgreSQL's bin directory (Debian keeps
// initdb and postgres off PATH), or PATH's.
func binDir(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	if len(dirs) > 0 {
		return dirs[len(dirs)-1]
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	conformance.ServiceUnavailable(t, "PostgreSQL is not installed (scripts/services start installs Debian's postgresql)")
	return ""
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

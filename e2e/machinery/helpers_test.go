package machinerye2e

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	mlog "github.com/RichardKnop/machinery/v2/log"
	"github.com/RichardKnop/machinery/v2/tasks"
	goredis "github.com/redis/go-redis/v9"
)

func init() {
	// machinery logs every task to stdout: keep the test output readable.
	mlog.Set(stdlog.New(io.Discard, "", 0))
}

// testDB is the Redis database these tests use (machinery keeps task
// states at bare UUIDs and its chord lock at a fixed key, so they get a
// database of their own on a shared server).
const testDB = 12

// need returns the value of an env var naming a server, skipping the test
// when it is unset, or failing it when ERRAND_REQUIRE_SERVICES=1.
func need(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("ERRAND_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%s is not set and ERRAND_REQUIRE_SERVICES=1: this test needs the server", name)
		}
		t.Skipf("%s is not set: no server to test machinery against", name)
	}
	return v
}

// unreachable skips t, or fails it with ERRAND_REQUIRE_SERVICES=1.
func unreachable(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("ERRAND_REQUIRE_SERVICES") == "1" {
		t.Fatalf("%s unreachable with ERRAND_REQUIRE_SERVICES=1: %v", what, err)
	}
	t.Skipf("%s unreachable: %v", what, err)
}

// redisServer is the Redis of ERRAND_REDIS_URL, at testDB.
type redisServer struct {
	addr, password string // machinery's form: [password@]host:port
	client         *goredis.Client
}

func newRedis(t *testing.T) *redisServer {
	t.Helper()
	raw := need(t, "ERRAND_REDIS_URL")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("ERRAND_REDIS_URL: %v", err)
	}
	pw, _ := u.User.Password()
	c := goredis.NewClient(&goredis.Options{Addr: u.Host, Password: pw, DB: testDB})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		unreachable(t, "Redis at ERRAND_REDIS_URL", err)
	}
	t.Cleanup(func() { c.Close() })
	addr := u.Host
	if pw != "" {
		addr = pw + "@" + addr
	}
	return &redisServer{addr: addr, password: pw, client: c}
}

// unique returns a name no other test run uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// runs counts how often each task ran, by its tag argument, across every
// worker of a test, errand's and machinery's alike.
type runs struct {
	mu sync.Mutex
	n  map[string]int
	by map[string]map[string]int // tag -> worker kind -> runs
	at map[string]time.Time      // tag -> first run
	fw map[string]string         // tag -> worker kind of the first run
}

func newRuns() *runs {
	return &runs{n: map[string]int{}, by: map[string]map[string]int{}, at: map[string]time.Time{}, fw: map[string]string{}}
}

// firstRun returns when tag first ran, and on which kind of worker.
func (r *runs) firstRun(tag string) (time.Time, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[tag], r.fw[tag]
}

func (r *runs) add(tag, who string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[tag]++
	if r.n[tag] == 1 {
		r.at[tag], r.fw[tag] = time.Now(), who
	}
	if r.by[tag] == nil {
		r.by[tag] = map[string]int{}
	}
	r.by[tag][who]++
	return r.n[tag]
}

// exactlyOnce fails t for every tag in want that did not run exactly
// want[tag] times.
func (r *runs) exactlyOnce(t *testing.T, want map[string]int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for tag, n := range want {
		if r.n[tag] != n {
			t.Errorf("task %s ran %d times (%v), want %d: each task runs once (plus its retries)", tag, r.n[tag], r.by[tag], n)
		}
	}
	for tag, n := range r.n {
		if _, ok := want[tag]; !ok {
			t.Errorf("task %s ran %d times, but was never sent", tag, n)
		}
	}
}

// kinds counts the runs by worker kind.
func (r *runs) kinds() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, by := range r.by {
		for k, n := range by {
			out[k] += n
		}
	}
	return out
}

// taskFuncs are the task functions, with machinery's and errand's common
// signature (plain args, an error last), counting runs as who.
func taskFuncs(r *runs, who string) map[string]any {
	return map[string]any{
		"add": func(tag string, a, b int64) (int64, error) {
			r.add(tag, who)
			return a + b, nil
		},
		"mul": func(tag string, a, b int64) (int64, error) {
			r.add(tag, who)
			return a * b, nil
		},
		"square": func(tag string, x int64) (int64, error) {
			r.add(tag, who)
			return x * x, nil
		},
		"sum": func(tag string, xs ...int64) (int64, error) {
			r.add(tag, who)
			var s int64
			for _, x := range xs {
				s += x
			}
			return s, nil
		},
		// flaky fails its first three runs: it needs every retry its
		// RetryCount of 3 allows, so a retry lost on the way (whichever
		// worker kind moved or ran it) fails the test.
		"flaky": func(tag string) (string, error) {
			if n := r.add(tag, who); n <= 3 {
				return "", fmt.Errorf("flaky run %d fails", n)
			}
			return "ok " + tag, nil
		},
	}
}

// sig returns a machinery signature for name with a tag and int64 args.
func sig(name, tag string, ints ...int64) *tasks.Signature {
	args := []tasks.Arg{{Type: "string", Value: tag}}
	for _, i := range ints {
		args = append(args, tasks.Arg{Type: "int64", Value: i})
	}
	return &tasks.Signature{Name: name, Args: args}
}

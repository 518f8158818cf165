package e2e_test

// The Redis broker and the Redis backend on one Redis: the two are
// co-located (driver.Colocator), so SendTask, the start of an attempt and
// the settle of a quiet success cost one round trip each (docs/redis.md,
// "Broker and backend on one Redis").

import (
	"context"
	"fmt"
	"os"
	"slices"
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
)

// redisDeployments returns a client of its own, with a roundTrips hook,
// to each Redis deployment the environment names: the single node
// (ERRAND_REDIS_URL) and the cluster (ERRAND_REDIS_CLUSTER_ADDRS). A
// missing or unreachable one skips, or fails when ERRAND_REQUIRE_SERVICES=1.
func redisDeployments(t *testing.T) map[string]countedRedis {
	out := map[string]countedRedis{}
	if u := os.Getenv("ERRAND_REDIS_URL"); u != "" {
		o, err := goredis.ParseURL(u)
		if err != nil {
			t.Fatalf("ERRAND_REDIS_URL: %v", err)
		}
		out["Single"] = countedRedis{rdb: goredis.NewClient(o)}
	}
	if a := os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS"); a != "" {
		out["Cluster"] = countedRedis{rdb: goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(a, ",")})}
	}
	for name, c := range out {
		t.Cleanup(func() { c.rdb.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.rdb.Ping(ctx).Err()
		cancel()
		if err != nil {
			conformance.ServiceUnavailable(t, name+" Redis unreachable: "+err.Error())
		}
		c.trips = &roundTrips{}
		c.rdb.AddHook(c.trips)
		out[name] = c
	}
	if len(out) < 2 {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_URL and ERRAND_REDIS_CLUSTER_ADDRS must both be set (scripts/services start exports them)")
	}
	return out
}

type countedRedis struct {
	rdb   goredis.UniversalClient
	trips *roundTrips
}

// roundTrips counts what a client sends: pipelines, those of them that
// met a NOSCRIPT (a server that has not cached a script yet: the broker
// then sends the refused scripts again, in a second pipeline) and single
// commands. A new connection's setup (HELLO, CLIENT SETINFO), which
// go-redis sends as a pipeline through the hooks, is not counted: dialing
// is not a round trip of the call that needed the connection.
type roundTrips struct {
	pipes, noscript, singles atomic.Int64
	// hold, when set, keeps every counted pipeline waiting until it is
	// closed: concurrent sends then find every flight busy and queue.
	hold atomic.Pointer[chan struct{}]
}

func (c *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !handshake(cmd) {
			c.singles.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c goredis.Cmder) bool { return !handshake(c) }) {
			return next(ctx, cmds)
		}
		c.pipes.Add(1)
		if h := c.hold.Load(); h != nil {
			<-*h
		}
		err := next(ctx, cmds)
		if slices.ContainsFunc(cmds, func(c goredis.Cmder) bool {
			return c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT")
		}) {
			c.noscript.Add(1)
		}
		return err
	}
}

// handshake reports whether cmd belongs to a new connection's setup.
func handshake(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (c *roundTrips) reset() {
	c.pipes.Store(0)
	c.noscript.Store(0)
	c.singles.Store(0)
}

// dropPrefix deletes every key a broker and a backend with prefix wrote
// ({prefix:queue}:…, {prefix}:…, prefix:task:…), on every node.
func dropPrefix(rdb goredis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drop := func(ctx context.Context, c *goredis.Client) error {
		for _, pat := range []string{prefix + ":*", "{" + prefix + ":*", "{" + prefix + "}:*"} {
			iter := c.Scan(ctx, 0, pat, 500).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
		return nil
	}
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		c.ForEachMaster(ctx, drop)
	case *goredis.Client:
		drop(ctx, c)
	}
}

// redisBrokerHarness is the Redis broker's harness on rdb under prefix,
// with every capability it declares.
func redisBrokerHarness(rdb goredis.UniversalClient, prefix string) conformance.BrokerHarness {
	return conformance.BrokerHarness{
		New: func(t testing.TB) errand.Broker {
			b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BrokerCaps{MaxPayload: redisbroker.DefaultMaxPayload, OrderedByETA: true, Priority: true, DetectsLostLease: true, Durable: true, Purge: true, Stats: true,
			Archive: true, List: true, Queues: true, Pause: true, Heartbeat: true, Find: true, Schedules: true,
			Unique: true, RateLimit: true, Colocate: true, CancelNotify: true},
		Timing: conformance.Timing{Lease: 300 * time.Millisecond, Delay: 300 * time.Millisecond, DelayBound: 100 * time.Millisecond},
		// Foreign bytes go where another program would put them: LPUSH
		// onto the queue's pending list.
		PushRaw: func(t testing.TB, _ errand.Broker, queue string, raw []byte) bool {
			t.Helper()
			if err := rdb.LPush(context.Background(), "{"+prefix+":"+queue+"}:pending", raw).Err(); err != nil {
				t.Fatalf("PushRaw: LPUSH onto the pending list: %v", err)
			}
			return true
		},
	}
}

// TestRedisBrokerWithRedisBackend runs the end-to-end cases on the Redis
// broker and the Redis backend sharing one client, so that the two are
// co-located on a single node (the Worker/Colocation cases check the
// broker's one-trip calls; on a cluster Colocate answers nil and they log
// that).
func TestRedisBrokerWithRedisBackend(t *testing.T) {
	t.Parallel()
	for name, c := range redisDeployments(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := c.rdb
			prefix := "errand-e2e-colocated"
			broker := redisBrokerHarness(rdb, prefix)
			backend := conformance.BackendHarness{
				New: func(t testing.TB, expiry time.Duration) errand.Backend {
					b := redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix, ResultExpiry: expiry})
					t.Cleanup(func() { b.Close() })
					return b
				},
				Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Start: true, PendingIfAbsent: true, Located: true, Cancel: true},
			}
			conformance.RunWorker(t, broker, backend)
		})
	}
}

// TestSendTaskOneRoundTrip: with the Redis broker and the Redis backend on
// one client, a SendTask costs one round trip (its PENDING state and its
// message in one pipeline), the task reads PENDING when SendTask returns,
// and a worker then runs it once; concurrent SendTask calls share
// pipelines.
func TestSendTaskOneRoundTrip(t *testing.T) {
	t.Parallel()
	for name, c := range redisDeployments(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := fmt.Sprintf("errand-e2e-1rt-%d", time.Now().UnixNano())
			t.Cleanup(func() { dropPrefix(c.rdb, prefix) })
			br := redisbroker.New(c.rdb, &redisbroker.Options{Prefix: prefix})
			be := redisbackend.New(c.rdb, &redisbackend.Options{Prefix: prefix, ResultExpiry: 5 * time.Minute})
			if _, cluster := c.rdb.(*goredis.ClusterClient); cluster {
				if br.Colocate(be) != nil {
					t.Fatal("Colocate on a Redis Cluster: calls; want nil (a task's state key and the queue's keys are in different slots)")
				}
				t.Skip("no co-location on a Redis Cluster (checked: Colocate answered nil); SendTask writes PENDING beside the publish")
			}
			srv, err := errand.NewServer(errand.Config{
				Broker:       br,
				Backend:      be,
				DefaultQueue: "q",
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			var mu sync.Mutex
			runs := map[int]int{}
			if err := srv.Register("count", func(i int) (int, error) {
				mu.Lock()
				runs[i]++
				mu.Unlock()
				return i, nil
			}); err != nil {
				t.Fatal(err)
			}

			var results []*errand.AsyncResult
			for i := range 20 {
				c.trips.reset()
				r, err := srv.SendTask(ctx, errand.NewSignature("count", i))
				if err != nil {
					t.Fatalf("SendTask %d: %v", i, err)
				}
				pipes, noscript, singles := c.trips.pipes.Load(), c.trips.noscript.Load(), c.trips.singles.Load()
				if singles != 0 || pipes != 1+min(noscript, 1) {
					t.Fatalf("round-trip promise broken: SendTask %d sent %d pipelines (%d met NOSCRIPT) and %d single commands; want one pipeline carrying PENDING and the message (a second only for scripts a server had not cached), no single command (docs/redis.md: the Redis broker carries the Redis backend's PENDING on one server)", i, pipes, noscript, singles)
				}
				st, err := r.State(ctx)
				if err != nil || st.State != errand.StatePending {
					t.Fatalf("SendTask %d: state %+v, %v right after it returned; want PENDING (SendTask returns once PENDING is recorded)", i, st, err)
				}
				results = append(results, r)
			}

			// The first sends' pipelines are held until every goroutine has
			// called SendTask and no new pipeline has started for a while:
			// the other sends are then queued behind busy flights, however
			// the goroutines were scheduled, and must join.
			c.trips.reset()
			hold := make(chan struct{})
			c.trips.hold.Store(&hold)
			start := make(chan struct{})
			var wg sync.WaitGroup
			var entered atomic.Int32
			conc := make([]*errand.AsyncResult, 50)
			errs := make([]error, 50)
			for j := range conc {
				wg.Go(func() {
					<-start
					entered.Add(1)
					conc[j], errs[j] = srv.SendTask(ctx, errand.NewSignature("count", 100+j))
				})
			}
			close(start)
			tick := time.NewTicker(time.Millisecond)
			for last, still := int64(-1), 0; entered.Load() < 50 || still < 20; <-tick.C {
				if p := c.trips.pipes.Load(); p == last {
					still++
				} else {
					last, still = p, 0
				}
			}
			tick.Stop()
			c.trips.hold.Store(nil)
			close(hold)
			wg.Wait()
			for j, err := range errs {
				if err != nil {
					t.Fatalf("concurrent SendTask %d: %v", j, err)
				}
			}
			if pipes, singles := c.trips.pipes.Load(), c.trips.singles.Load(); pipes >= 50 || singles != 0 {
				t.Fatalf("round-trip promise broken: 50 concurrent SendTask calls sent %d pipelines and %d single commands; want fewer than 50 pipelines (concurrent sends join one carried call) and no single command", pipes, singles)
			}
			results = append(results, conc...)

			w := srv.NewWorker(errand.WorkerConfig{Concurrency: 8})
			w.Start()
			t.Cleanup(func() { w.Shutdown(context.Background()) })
			for _, r := range results {
				st, err := r.Wait(ctx)
				if err != nil || st.State != errand.StateSuccess {
					t.Fatalf("task %s: %+v, %v; want SUCCESS", r.Signature.UUID, st, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(runs) != len(results) {
				t.Fatalf("at-least-once promise broken: %d distinct tasks ran; want all %d sent", len(runs), len(results))
			}
			for i, n := range runs {
				if n != 1 {
					t.Fatalf("task %d ran %d times; want once (no message published twice, none redelivered)", i, n)
				}
			}
		})
	}
}

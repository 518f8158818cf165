package e2e_test

// Issue 24, item 7: Redis Sentinel. A worker and producers open the Redis
// broker and backend by redis-sentinel:// URL on the sentinel set of
// scripts/services (a master, a replica, three sentinels); with tasks
// queued, running and delayed, and a producer sending all along, one
// sentinel is told to fail over (SENTINEL FAILOVER). Once the sentinels
// name the new master, every task is accounted for: each kind's lost
// (acknowledged by SendTask, never run), duplicated (run more than once)
// and ran-but-not-SUCCESS (its run's record gone) are logged, and
// docs/redis.md ("Sentinel") keeps the figures. The kinds:
//
//	running  slow tasks a worker holds through the failover
//	queued   sent before it to a queue no worker reads until after it
//	delayed  sent before it, due 1–3 s later, read after it
//	live     sent every 5 ms from before it until a second after the
//	         switch, to a queue a worker reads all along
//	later    sent beside each live task, to a queue read after it
//
// Run twice: without and with WAIT 1 (every write so far on a replica)
// just before the failover. With WAIT, nothing sent before it may be
// lost; live and later are measured, never asserted (the sends during the
// switch are what Sentinel's asynchronous replication may lose).

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/redis"
	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

const (
	sentinelRunning = 8   // slow tasks running through the failover
	sentinelQueued  = 200 // tasks waiting in a queue no worker reads until after it
	sentinelDelayed = 50  // tasks due 1–3 s after they are sent
	sentinelLease   = 5 * time.Second
)

// sentinelSet is the deployment of ERRAND_REDIS_SENTINEL_ADDRS and
// ERRAND_REDIS_SENTINEL_MASTER.
type sentinelSet struct {
	addrs     []string
	master    string
	sentinels []*goredis.SentinelClient
}

func newSentinelSet(t *testing.T) *sentinelSet {
	addrs, master := os.Getenv("ERRAND_REDIS_SENTINEL_ADDRS"), os.Getenv("ERRAND_REDIS_SENTINEL_MASTER")
	if addrs == "" || master == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_SENTINEL_ADDRS and ERRAND_REDIS_SENTINEL_MASTER unset (scripts/services start exports them)")
	}
	s := &sentinelSet{addrs: strings.Split(addrs, ","), master: master}
	for _, a := range s.addrs {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: a})
		t.Cleanup(func() { c.Close() })
		s.sentinels = append(s.sentinels, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.sentinels[0].GetMasterAddrByName(ctx, master).Result(); err != nil {
		conformance.ServiceUnavailable(t, fmt.Sprintf("sentinel %s does not answer for master %q: %v", s.addrs[0], master, err))
	}
	return s
}

// url is the set's redis-sentinel:// URL with the given errand prefix.
func (s *sentinelSet) url(prefix string) string {
	return "redis-sentinel://" + strings.Join(s.addrs, ",") + "/0?master=" + url.QueryEscape(s.master) + "&prefix=" + url.QueryEscape(prefix)
}

// settled returns the master's address once every sentinel names it and
// knows its replica as healthy (role slave, link up), and the master
// itself says its replica is online: a SENTINEL FAILOVER then has a
// replica in sync to promote. A previous failover's old master needs
// about 10 s to be turned into a replica.
func (s *sentinelSet) settled(ctx context.Context, t *testing.T) string {
	var why string
	for {
		if addr, err := s.healthy(ctx); err == nil {
			return addr
		} else {
			why = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sentinel set not settled: %s", why)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *sentinelSet) healthy(ctx context.Context) (string, error) {
	var master string
	for i, c := range s.sentinels {
		a, err := c.GetMasterAddrByName(ctx, s.master).Result()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %v", s.addrs[i], err)
		}
		addr := strings.Join(a, ":")
		if master != "" && addr != master {
			return "", fmt.Errorf("sentinels disagree: %s and %s", master, addr)
		}
		master = addr
		reps, err := c.Replicas(ctx, s.master).Result()
		if err != nil {
			return "", err
		}
		ok := 0
		for _, r := range reps {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" && r["master-host"]+":"+r["master-port"] == master {
				ok++
			}
		}
		if ok == 0 {
			return "", fmt.Errorf("sentinel %s knows no healthy replica of %s: %v", s.addrs[i], master, reps)
		}
	}
	m := goredis.NewClient(&goredis.Options{Addr: master})
	defer m.Close()
	info, err := m.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	if !strings.Contains(info, "role:master") || !strings.Contains(info, "state=online") {
		return "", fmt.Errorf("master %s: %s", master, info)
	}
	return master, nil
}

// failover makes the first sentinel fail over, retrying while it has no
// replica to promote yet or a failover is under way.
func (s *sentinelSet) failover(ctx context.Context, t *testing.T) {
	for {
		err := s.sentinels[0].Failover(ctx, s.master).Err()
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "NOGOODSLAVE") && !strings.Contains(err.Error(), "INPROG") {
			t.Fatalf("SENTINEL FAILOVER %s: %v", s.master, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("SENTINEL FAILOVER %s: %v until the deadline", s.master, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// switched waits until every sentinel names a master other than old, and
// that server answers as a master; it returns the new master's address.
func (s *sentinelSet) switched(ctx context.Context, t *testing.T, old string) string {
	for {
		var addrs []string
		for _, c := range s.sentinels {
			if a, err := c.GetMasterAddrByName(ctx, s.master).Result(); err == nil {
				addrs = append(addrs, strings.Join(a, ":"))
			}
		}
		if len(addrs) == len(s.sentinels) && addrs[0] != old && len(slices.Compact(addrs)) == 1 {
			m := goredis.NewClient(&goredis.Options{Addr: addrs[0]})
			role, err := m.Do(ctx, "ROLE").Slice()
			m.Close()
			if err == nil && len(role) > 0 && role[0] == "master" {
				return addrs[0]
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no new master after SENTINEL FAILOVER: sentinels name %v (old master %s)", addrs, old)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReplicated makes every write the master has taken reach a replica:
// a write and WAIT 1 on one connection (WAIT waits for the offset of its
// own connection's last write, which is past every earlier write).
func waitReplicated(ctx context.Context, t *testing.T, master string) {
	m := goredis.NewClient(&goredis.Options{Addr: master})
	defer m.Close()
	pipe := m.Pipeline()
	pipe.Set(ctx, "errand-test:sentinel:wait", time.Now().String(), time.Minute)
	n := pipe.Do(ctx, "WAIT", 1, 5000)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("WAIT 1 on %s: %v", master, err)
	}
	if v, _ := n.Int(); v < 1 {
		t.Fatalf("WAIT 1 5000 on %s: %d replicas acknowledged; want 1", master, v)
	}
}

// TestSentinelFailover: see the top of the file.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	set := newSentinelSet(t)
	for _, wait := range []bool{false, true} {
		name := "NoWait"
		if wait {
			name = "Wait"
		}
		t.Run(name, func(t *testing.T) { runSentinelFailover(t, set, wait) })
	}
}

// sentinelTally counts the runs of each task, keyed kind/index.
type sentinelTally struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *sentinelTally) add(kind string, i int) {
	c.mu.Lock()
	c.runs[fmt.Sprintf("%s/%d", kind, i)]++
	c.mu.Unlock()
}

func (c *sentinelTally) get(kind string, i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[fmt.Sprintf("%s/%d", kind, i)]
}

// sentinelSent is one kind's sends: each acknowledged task's result by
// index, and the indexes whose SendTask failed.
type sentinelSent struct {
	kind    string
	results map[int]*errand.AsyncResult
	refused []int
}

func runSentinelFailover(t *testing.T, set *sentinelSet, wait bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	oldMaster := set.settled(ctx, t)

	prefix := fmt.Sprintf("errand-test-sentinel-%d", time.Now().UnixNano())
	broker, err := errand.OpenBroker(ctx, set.url(prefix))
	if err != nil {
		t.Fatal(err)
	}
	backend, err := errand.OpenBackend(ctx, set.url(prefix))
	if err != nil {
		broker.Close()
		t.Fatal(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	tally := &sentinelTally{runs: map[string]int{}}
	release := make(chan struct{})
	var started atomic.Int32
	startedAll := make(chan struct{})
	err = srv.Register("sentinel", func(ctx context.Context, kind string, i int) error {
		tally.add(kind, i)
		if kind == "running" {
			if started.Add(1) == sentinelRunning {
				close(startedAll)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var reported atomic.Int32
	workerCfg := func(queues ...string) errand.WorkerConfig {
		qs := map[string]int{}
		for _, q := range queues {
			qs[q] = 1
		}
		return errand.WorkerConfig{
			Queues: qs, Concurrency: sentinelRunning + 4, Lease: sentinelLease,
			ErrorBackoff: 50 * time.Millisecond, MaxErrorBackoff: 500 * time.Millisecond,
			CallTimeout:  2 * time.Second,
			ErrorHandler: func(error) { reported.Add(1) },
		}
	}
	send := func(s *sentinelSent, i int, eta *time.Time) {
		sig := errand.NewSignature("sentinel", s.kind, i)
		sig.RoutingKey = s.kind
		sig.ETA = eta
		r, err := srv.SendTask(ctx, sig)
		if err != nil {
			s.refused = append(s.refused, i)
			return
		}
		s.results[i] = r
	}
	newSent := func(kind string) *sentinelSent {
		return &sentinelSent{kind: kind, results: map[int]*errand.AsyncResult{}}
	}

	// Running: slow tasks a worker holds through the failover.
	first := srv.NewWorker(workerCfg("running", "live"))
	first.Start()
	defer first.Shutdown(context.Background())
	running := newSent("running")
	for i := range sentinelRunning {
		send(running, i, nil)
	}
	select {
	case <-startedAll:
	case <-ctx.Done():
		t.Fatalf("only %d of %d slow tasks started", started.Load(), sentinelRunning)
	}
	// Queued and delayed: no worker reads their queues until the new
	// master is in place.
	queued, delayed := newSent("queued"), newSent("delayed")
	for i := range sentinelQueued {
		send(queued, i, nil)
	}
	for i := range sentinelDelayed {
		eta := time.Now().Add(time.Second + time.Duration(i)*2*time.Second/sentinelDelayed)
		send(delayed, i, &eta)
	}
	for _, s := range []*sentinelSent{running, queued, delayed} {
		if len(s.refused) > 0 {
			t.Fatalf("%d %s tasks refused before the failover: %v", len(s.refused), s.kind, s.refused)
		}
	}
	// Live: a producer sending all along, to a queue the first worker
	// reads, from before the failover until a second after the switch.
	live, liveQueued := newSent("live"), newSent("later")
	stopLive := make(chan struct{})
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		pace := time.NewTicker(5 * time.Millisecond) // a producer's pace
		defer pace.Stop()
		for i := 0; ; i++ {
			send(live, i, nil)
			send(liveQueued, i, nil)
			select {
			case <-stopLive:
				return
			case <-pace.C:
			}
		}
	}()

	if wait {
		waitReplicated(ctx, t, oldMaster)
	}
	began := time.Now()
	set.failover(ctx, t)
	newMaster := set.switched(ctx, t, oldMaster)
	switchTook := time.Since(began)
	close(release)
	after := time.NewTimer(time.Second)
	<-after.C
	close(stopLive)
	<-liveDone

	second := srv.NewWorker(workerCfg("queued", "delayed", "later"))
	second.Start()
	defer second.Shutdown(context.Background())

	// Every acknowledged task should run; wait until each has, or until
	// two leases and a margin have passed (a lost message never will).
	kinds := []*sentinelSent{running, queued, delayed, live, liveQueued}
	deadline := time.Now().Add(2*sentinelLease + 5*time.Second)
	missing := func() int {
		n := 0
		for _, s := range kinds {
			for i := range s.results {
				if tally.get(s.kind, i) == 0 {
					n++
				}
			}
		}
		return n
	}
	for missing() > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// A redelivery of a task whose ack was lost in the switch comes one
	// lease after it: wait that long before counting duplicates.
	settle := time.NewTimer(sentinelLease + 2*time.Second)
	<-settle.C

	mode := "without WAIT"
	if wait {
		mode = "with WAIT 1 before the failover"
	}
	t.Logf("%s: failover %s -> %s, sentinels agreed %v after SENTINEL FAILOVER; %d worker errors reported",
		mode, oldMaster, newMaster, switchTook.Round(time.Millisecond), reported.Load())
	for _, s := range kinds {
		var lost, dup, notSuccess, ranRefused []int
		states := map[string]int{}
		for i, r := range s.results {
			switch n := tally.get(s.kind, i); {
			case n == 0:
				lost = append(lost, i)
			case n > 1:
				dup = append(dup, i)
			}
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := r.State(sctx)
			scancel()
			if tally.get(s.kind, i) > 0 && (err != nil || st.State != errand.StateSuccess) {
				notSuccess = append(notSuccess, i)
				switch {
				case errors.Is(err, errand.ErrTaskNotFound):
					states["no state"]++
				case err != nil:
					states[err.Error()]++
				default:
					states[string(st.State)]++
				}
			}
		}
		for _, i := range s.refused {
			if tally.get(s.kind, i) > 0 {
				ranRefused = append(ranRefused, i)
			}
		}
		slices.Sort(lost)
		slices.Sort(dup)
		slices.Sort(notSuccess)
		t.Logf("%-8s sent %3d, acknowledged %3d, refused %d (of which ran %d); lost %d %s, duplicated %d %s, ran but not SUCCESS %d %s %v",
			s.kind, len(s.results)+len(s.refused), len(s.results), len(s.refused), len(ranRefused), len(lost), spans(lost), len(dup), spans(dup), len(notSuccess), spans(notSuccess), states)
		if wait && s.kind != "live" && s.kind != "later" && len(lost) > 0 {
			t.Errorf("%d %s tasks sent before the failover, acknowledged and replicated (WAIT 1) never ran: %v (a failover loses nothing a replica had)", len(lost), s.kind, lost)
		}
	}
	if len(live.results) == 0 {
		t.Errorf("the live producer sent nothing: the run proves nothing about sends during the failover")
	}
	shutdown, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	for _, w := range []*errand.Worker{first, second} {
		if err := w.Shutdown(shutdown); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("worker shutdown: %v", err)
		}
	}
}

// spans prints sorted indexes as ranges: [3-7 9].
func spans(xs []int) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		} else {
			parts = append(parts, fmt.Sprint(xs[i]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, " ") + "]"
}

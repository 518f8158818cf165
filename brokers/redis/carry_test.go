package redisbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

// sameServerBackend stands in for errand's Redis backend, whose module
// this one cannot import: it declares its location as the backend does
// (driver.Located: a *redisconn.States of its client, prefix and an
// expiry of a minute). The rest of driver.Backend comes from a memory
// backend and is not used.
type sameServerBackend struct {
	driver.Backend
	rdb    goredis.UniversalClient
	prefix string
	loc    *redisconn.States
}

func newSameServerBackend(t testing.TB, rdb goredis.UniversalClient, prefix string) *sameServerBackend {
	mem := memorybackend.New(nil)
	t.Cleanup(func() { mem.Close() })
	return &sameServerBackend{Backend: mem, rdb: rdb, prefix: prefix,
		loc: &redisconn.States{Client: rdb, Prefix: prefix, Expiry: time.Minute}}
}

func (s *sameServerBackend) Location() any { return s.loc }

// The one-trip calls of a driver.Colocation, as functions (nil: Colocate
// answered nil).
type (
	sendFunc       func(ctx context.Context, sts []*driver.TaskState, msgs []driver.Message) (bool, error)
	settleFunc     func(ctx context.Context, ds []*driver.Delivery, sts []*driver.TaskState) []error
	fetchStartFunc func(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error)
)

func carryPending(b *redisbroker.Broker, be driver.Backend) sendFunc {
	if c := b.Colocate(be); c != nil {
		return c.Send
	}
	return nil
}

func carrySettle(b *redisbroker.Broker, be driver.Backend) settleFunc {
	if c := b.Colocate(be); c != nil {
		return c.Settle
	}
	return nil
}

func carryStart(b *redisbroker.Broker, be driver.Backend) fetchStartFunc {
	if c := b.Colocate(be); c != nil {
		return c.FetchStart
	}
	return nil
}

func (s *sameServerBackend) key(id string) string { return s.prefix + ":task:" + id }

func (s *sameServerBackend) state(ctx context.Context, t *testing.T, id string) driver.State {
	t.Helper()
	v, err := s.rdb.Get(ctx, s.key(id)).Result()
	if err == goredis.Nil {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var st driver.TaskState
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		t.Fatal(err)
	}
	return st.State
}

// tripCounter counts what a client sends: pipelines (and those that met a
// NOSCRIPT, whose scripts the broker sends again) and single commands;
// not the setup of new connections. On a
// cluster client it also counts, per node, the pipelines go-redis sends.
type tripCounter struct {
	pipes, noscript, singles atomic.Int64
	mu                       sync.Mutex
	perNode                  map[string]int
}

func (c *tripCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *tripCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !handshake([]goredis.Cmder{cmd}) {
			c.singles.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *tripCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if handshake(cmds) {
			return next(ctx, cmds)
		}
		c.pipes.Add(1)
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
				c.noscript.Add(1)
				break
			}
		}
		return err
	}
}

// handshake reports whether cmds are a new connection's setup (HELLO,
// CLIENT SETINFO), which go-redis sends through the hooks: dialing is not
// a round trip of the call that needed the connection.
func handshake(cmds []goredis.Cmder) bool {
	return !slices.ContainsFunc(cmds, func(c goredis.Cmder) bool {
		switch c.Name() {
		case "hello", "client", "auth", "select":
			return false
		}
		return true
	})
}

// nodeHook counts the pipelines one cluster node receives.
type nodeHook struct {
	c    *tripCounter
	addr string
}

func (h nodeHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h nodeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h nodeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !handshake(cmds) {
			h.c.mu.Lock()
			h.c.perNode[h.addr]++
			h.c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (c *tripCounter) reset() {
	c.pipes.Store(0)
	c.noscript.Store(0)
	c.singles.Store(0)
	c.mu.Lock()
	clear(c.perNode)
	c.mu.Unlock()
}

// check fails t unless what was sent since reset is one pipeline (and a
// second when a server had not cached the scripts yet, which the broker
// then sends again with their source) and no single command; on a
// cluster, at most one pipeline per node for each of those.
func (c *tripCounter) check(t *testing.T, what string) {
	t.Helper()
	pipes, noscript, singles := c.pipes.Load(), c.noscript.Load(), c.singles.Load()
	if singles != 0 || pipes != 1+min(noscript, 1) {
		t.Fatalf("round-trip promise broken: %s sent %d pipelines (%d refused NOSCRIPT) and %d single commands; want one pipeline (a second only after NOSCRIPT) and no single command", what, pipes, noscript, singles)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, n := range c.perNode {
		if int64(n) > pipes {
			t.Fatalf("round-trip promise broken: %s sent %d pipelines to cluster node %s; want one round trip per node (per pipeline)", what, n, addr)
		}
	}
}

// countedClient returns a client of its own to the deployment name names
// ("Single" or "Cluster", as servers), with a tripCounter.
func countedClient(t *testing.T, name string) (goredis.UniversalClient, *tripCounter) {
	t.Helper()
	c := &tripCounter{perNode: map[string]int{}}
	var rdb goredis.UniversalClient
	switch name {
	case "Single":
		o, err := goredis.ParseURL(os.Getenv("ERRAND_REDIS_URL"))
		if err != nil {
			t.Fatal(err)
		}
		rdb = goredis.NewClient(o)
	case "Cluster":
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(os.Getenv("ERRAND_REDIS_CLUSTER_ADDRS"), ",")})
		cc.OnNewNode(func(n *goredis.Client) { n.AddHook(nodeHook{c, n.Options().Addr}) })
		rdb = cc
	default:
		t.Fatalf("unknown deployment %q", name)
	}
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(c)
	return rdb, c
}

// carrySetup returns a counted client of deployment name, a broker and a
// same-server backend on it under a fresh prefix, and the broker's carrier
// of that backend.
func carrySetup(t *testing.T, name string) (goredis.UniversalClient, *tripCounter, *redisbroker.Broker, *sameServerBackend, sendFunc) {
	t.Helper()
	rdb, c := countedClient(t, name)
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := newSameServerBackend(t, rdb, prefix)
	if _, ok := rdb.(*goredis.ClusterClient); ok {
		if b.Colocate(be) != nil {
			t.Fatal("Colocate on a Redis Cluster: calls; want nil (one step cannot reach a state key and the queue's keys)")
		}
		t.Skip("no co-location on a Redis Cluster (checked: Colocate answered nil)")
	}
	return rdb, c, b, be, carryPending(b, be)
}

func pendingStates(ids ...string) []*driver.TaskState {
	out := make([]*driver.TaskState, len(ids))
	for i, id := range ids {
		out[i] = &driver.TaskState{TaskUUID: id, TaskName: "t", State: driver.StatePending, CreatedAt: time.Now().UTC()}
	}
	return out
}

// TestCarryPending: with errand's Redis backend on its own server, the
// broker publishes and records PENDING in one pipeline: PENDING where a
// task has no state, the state already there left alone (a worker may
// have recorded STARTED first), every message fetchable once.
func TestCarryPending(t *testing.T) {
	for name := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rdb, c, b, be, carry := carrySetup(t, name)
			if carry == nil {
				t.Fatal("CarryPending = nil for a backend on the broker's own client; want a carrier")
			}
			// Warm up: the server caches the scripts.
			if err := b.Publish(ctx, driver.Message{ID: "w", Queue: "warm", Body: []byte("w")}); err != nil {
				t.Fatal(err)
			}

			started := rand.Text()
			if err := rdb.Set(ctx, be.key(started), `{"task_uuid":"`+started+`","state":"STARTED"}`, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			ids := []string{rand.Text(), rand.Text(), started, rand.Text()}
			msgs := []driver.Message{
				{ID: ids[0], Queue: "a", Body: []byte("0")},
				{ID: ids[1], Queue: "b", Body: []byte("1")},
				{ID: ids[2], Queue: "a", Body: []byte("2")},
				{ID: ids[3], Queue: "a", Body: []byte("3"), Priority: 5},
			}
			for round := range 3 {
				c.reset()
				var sts []*driver.TaskState
				var ms []driver.Message
				if round == 0 {
					sts, ms = pendingStates(ids...), msgs
				} else { // a lone send, as a sequential SendTask makes
					id := rand.Text()
					sts, ms = pendingStates(id), []driver.Message{{ID: id, Queue: "c", Body: []byte(id)}}
				}
				published, err := carry(ctx, sts, ms)
				if !published || err != nil {
					t.Fatalf("carried publish %d = %v, %v; want published, no error", round, published, err)
				}
				c.check(t, "a carried publish")
				if round > 0 {
					if st := be.state(ctx, t, sts[0].TaskUUID); st != driver.StatePending {
						t.Fatalf("state after a carried publish: %q; want PENDING", st)
					}
					if d := fetchOne(ctx, t, b, "c"); d.ID != sts[0].TaskUUID {
						t.Fatalf("fetched %q; want %q", d.ID, sts[0].TaskUUID)
					}
				}
			}

			for _, id := range []string{ids[0], ids[1], ids[3]} {
				if st := be.state(ctx, t, id); st != driver.StatePending {
					t.Fatalf("task %s with no state: %q after the carried publish; want PENDING", id, st)
				}
			}
			if st := be.state(ctx, t, started); st != driver.StateStarted {
				t.Fatalf("task already STARTED: %q after the carried publish; want STARTED left (PENDING only where absent)", st)
			}
			got := map[string]string{}
			for _, q := range []string{"a", "a", "a", "b"} {
				d := fetchOne(ctx, t, b, q)
				got[d.ID] = string(d.Body)
				if err := ackOne(ctx, b, d); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range msgs {
				if got[m.ID] != string(m.Body) {
					t.Fatalf("message %d (%s): fetched body %q; want %q (every carried message published)", i, m.ID, got[m.ID], m.Body)
				}
			}
			for _, q := range []string{"a", "b"} {
				if st, err := b.Stats(ctx, q); err != nil || st.Pending != 0 {
					t.Fatalf("queue %s after fetching every message: %+v, %v; want nothing left (each published once)", q, st, err)
				}
			}
		})
	}
}

// TestCarryPendingAfterScriptFlush: on a server that lost the scripts,
// the refused scripts are sent again with EVAL, alone; the states are
// written once and each message is published once, also on a cluster
// where only some nodes lost them (a script that ran on one node is not
// run again because another lacked it).
func TestCarryPendingAfterScriptFlush(t *testing.T) {
	for name := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rdb, c, b, be, carry := carrySetup(t, name)
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			// On the cluster, one node has the publish script again.
			if err := b.Publish(ctx, driver.Message{ID: "w", Queue: "warm", Body: []byte("w")}); err != nil {
				t.Fatal(err)
			}
			var ids []string
			var msgs []driver.Message
			for i := range 12 { // queues on every node of the cluster
				id := rand.Text()
				ids = append(ids, id)
				// Of a priority: the script's path on one node too (due
				// now at priority 0 goes as a transaction, no script).
				msgs = append(msgs, driver.Message{ID: id, Queue: "q" + strconv.Itoa(i), Body: []byte(id), Priority: 1})
			}
			if name == "Single" {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			c.reset()
			published, err := carry(ctx, pendingStates(ids...), msgs)
			if !published || err != nil {
				t.Fatalf("carried publish after SCRIPT FLUSH = %v, %v; want published, no error", published, err)
			}
			// Tests of other packages on the same servers may load the
			// script again between the flush and the call: then one
			// pipeline and no NOSCRIPT.
			if p, n := c.pipes.Load(), c.noscript.Load(); p > 2 || n > 1 || p != 1+n {
				t.Fatalf("carried publish after SCRIPT FLUSH sent %d pipelines (%d refused NOSCRIPT); want one, plus one EVAL of the refused scripts alone when a NOSCRIPT came back", p, n)
			}
			for _, id := range ids {
				if st := be.state(ctx, t, id); st != driver.StatePending {
					t.Fatalf("task %s: %q; want PENDING", id, st)
				}
			}
			for _, m := range msgs {
				if st, err := b.Stats(ctx, m.Queue); err != nil || st.Pending != 1 {
					t.Fatalf("queue %s after a carried publish of one message: %+v, %v; want exactly one pending (published once, though some scripts went twice)", m.Queue, st, err)
				}
			}
		})
	}
}

// TestCarryPendingRefusals: no carrier where the broker cannot write the
// backend's states (another server or DB, a backend it does not know), and
// a carried publish checks messages as Publish does.
func TestCarryPendingRefusals(t *testing.T) {
	srv := servers(t)
	rdb := srv["Single"]
	o := rdb.(*goredis.Client).Options()
	other := func(o goredis.Options) goredis.UniversalClient {
		c := goredis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		return c
	}
	otherDB, otherAddr, equal := *o, *o, *o
	otherDB.DB++
	otherAddr.Addr = "127.0.0.1:1"
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test-refusals"})
	for what, be := range map[string]driver.Backend{
		"another DB":      newSameServerBackend(t, other(otherDB), "errand-test-refusals"),
		"another address": newSameServerBackend(t, other(otherAddr), "errand-test-refusals"),
		"the cluster":     newSameServerBackend(t, srv["Cluster"], "errand-test-refusals"),
		"a memory backend": func() driver.Backend {
			m := memorybackend.New(nil)
			t.Cleanup(func() { m.Close() })
			return m
		}(),
	} {
		if carryPending(b, be) != nil {
			t.Errorf("CarryPending with a backend on %s: a carrier; want nil (the broker cannot write its states)", what)
		}
	}
	carry := carryPending(b, newSameServerBackend(t, other(equal), "errand-test-refusals"))
	if carry == nil {
		t.Fatal("CarryPending with a backend on another client of the same server and DB: nil; want a carrier")
	}
	ctx := context.Background()
	id := rand.Text()
	big := make([]byte, redisbroker.DefaultMaxPayload+1)
	for what, m := range map[string]driver.Message{
		"a body over MaxPayload": {ID: id, Queue: "q", Body: big},
		"an ID with a newline":   {ID: id + "\nx", Queue: "q", Body: []byte("x")},
	} {
		published, err := carry(ctx, pendingStates(id), []driver.Message{m})
		if published || err == nil {
			t.Fatalf("carried publish of %s = %v, %v; want refused as Publish refuses it", what, published, err)
		}
		if what == "a body over MaxPayload" && !errors.Is(err, driver.ErrPayloadTooLarge) {
			t.Fatalf("carried publish of %s: %v; want ErrPayloadTooLarge", what, err)
		}
		if n := rdb.Exists(ctx, "errand-test-refusals:task:"+id).Val(); n != 0 {
			t.Fatalf("carried publish of %s wrote the state; want nothing sent", what)
		}
	}
}

// TestCarryPendingFailures: published reports whether the messages were
// taken. A publish that fails (closed client) is not published; a state
// that cannot be encoded beside a publish that succeeds is published, with
// the state's error, and nothing written for it.
func TestCarryPendingFailures(t *testing.T) {
	for name := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rdb, _, b, be, carry := carrySetup(t, name)

			// A state that cannot be encoded: the messages go, the state's
			// error is reported.
			id := rand.Text()
			bad := pendingStates(id)
			bad[0].Results = []driver.Result{{Type: "x", Value: json.RawMessage("{not json")}}
			published, err := carry(ctx, bad, []driver.Message{{ID: id + "-2", Queue: "q", Body: []byte("y")}})
			if !published || err == nil || !strings.Contains(err.Error(), "encode state") {
				t.Fatalf("carried publish whose state cannot be encoded = %v, %v; want published with the encode error", published, err)
			}
			if d := fetchOne(ctx, t, b, "q"); d.ID != id+"-2" {
				t.Fatalf("fetched %q; want %q (the messages of a publish whose states failed are queued)", d.ID, id+"-2")
			}
			if n := rdb.Exists(ctx, be.key(id)).Val(); n != 0 {
				t.Fatalf("a state that cannot be encoded was written")
			}

			rdb.Close()
			id = rand.Text()
			published, err = carry(ctx, pendingStates(id), []driver.Message{{ID: id, Queue: "q", Body: []byte("z")}})
			if published || !errors.Is(err, driver.ErrClosed) {
				t.Fatalf("carried publish on a closed client = %v, %v; want not published, ErrClosed", published, err)
			}
		})
	}
}

// failRedo fails, without sending it, the first pipeline that carries an
// EVAL (the resend of scripts refused NOSCRIPT), as go-redis fails a
// pipeline whose connection cannot be set up: no error on its commands.
type failRedo struct{ failed atomic.Bool }

func (*failRedo) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (*failRedo) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (f *failRedo) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "eval" && f.failed.CompareAndSwap(false, true) {
				return errors.New("connection refused while the EVAL pipeline was set up")
			}
		}
		return next(ctx, cmds)
	}
}

// TestPublishRedoFails: a publish whose scripts the server refused
// NOSCRIPT and whose resend with EVAL then failed before reaching the
// server is not published, and says so: Publish returns an error, the
// carried publish reports published false.
func TestPublishRedoFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, _, b, _, carry := carrySetup(t, "Single")
	for _, tc := range []struct {
		name string
		send func(m driver.Message) (bool, error)
	}{
		{"Publish", func(m driver.Message) (bool, error) { err := b.Publish(ctx, m); return err == nil, err }},
		{"carried", func(m driver.Message) (bool, error) { return carry(ctx, pendingStates(m.ID), []driver.Message{m}) }},
	} {
		f := &failRedo{}
		rdb.AddHook(f)
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Of a priority: the script's path (a message due now at priority
		// 0 goes as a transaction, no script: TestPublishTransactionFails).
		m := driver.Message{ID: rand.Text(), Queue: "redo-" + tc.name, Body: []byte("x"), Priority: 1}
		published, err := tc.send(m)
		if !f.failed.Load() {
			// Another package's tests loaded the script again between the
			// flush and the send: no resend happened to fail.
			t.Logf("%s: no NOSCRIPT came back; nothing to check", tc.name)
			continue
		}
		if published || err == nil {
			t.Fatalf("%s whose EVAL resend failed unsent: published %v, error %v; want not published and an error (the message is not queued)", tc.name, published, err)
		}
		if st, err := b.Stats(ctx, m.Queue); err != nil || st.Pending != 0 {
			t.Fatalf("%s: queue %+v, %v; want nothing queued", tc.name, st, err)
		}
	}
}

// failTx fails, without sending it, the first transaction (MULTI ...
// EXEC), as go-redis fails one whose connection cannot be set up.
type failTx struct{ failed atomic.Bool }

func (*failTx) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (*failTx) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (f *failTx) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" && f.failed.CompareAndSwap(false, true) {
			return errors.New("connection refused while the transaction was set up")
		}
		return next(ctx, cmds)
	}
}

// TestPublishTransactionFails: a publish sent as one transaction (one
// node, due now, priority 0) that fails before reaching the server is
// not published, and says so; neither the message nor the state is
// written.
func TestPublishTransactionFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, _, b, be, carry := carrySetup(t, "Single")
	for _, tc := range []struct {
		name string
		send func(m driver.Message) (bool, error)
	}{
		{"Publish", func(m driver.Message) (bool, error) { err := b.Publish(ctx, m); return err == nil, err }},
		{"carried", func(m driver.Message) (bool, error) { return carry(ctx, pendingStates(m.ID), []driver.Message{m}) }},
	} {
		f := &failTx{}
		rdb.AddHook(f)
		m := driver.Message{ID: rand.Text(), Queue: "tx-" + tc.name, Body: []byte("x")}
		published, err := tc.send(m)
		if !f.failed.Load() {
			t.Fatalf("%s of a message due now at priority 0 on one node sent no transaction", tc.name)
		}
		if published || err == nil {
			t.Fatalf("%s whose transaction failed unsent: published %v, error %v; want not published and an error", tc.name, published, err)
		}
		if st, err := b.Stats(ctx, m.Queue); err != nil || st.Pending != 0 {
			t.Fatalf("%s: queue %+v, %v; want nothing queued", tc.name, st, err)
		}
		if n := rdb.Exists(ctx, be.key(m.ID)).Val(); n != 0 {
			t.Fatalf("carried: the state of a send whose transaction failed was written")
		}
	}
}

// TestCarrySettle: with errand's Redis backend on its own single server,
// the broker writes final states in the ack's script, in one round trip:
// each state written, each delivery acked and counted, a lost lease
// reported with its state written all the same. On a cluster (a task's
// state key and the queue's keys are in different slots) and for a
// backend elsewhere there is no carrier.
func TestCarrySettle(t *testing.T) {
	srv := servers(t)
	if b, be := redisbroker.New(srv["Cluster"], nil), newSameServerBackend(t, srv["Cluster"], "errand-test-settle"); carrySettle(b, be) != nil {
		t.Error("CarrySettle on a Redis Cluster: a carrier; want nil (one script cannot reach a state key and the queue's keys)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, c := countedClient(t, "Single")
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := newSameServerBackend(t, rdb, prefix)
	mem := memorybackend.New(nil)
	t.Cleanup(func() { mem.Close() })
	if carrySettle(b, mem) != nil {
		t.Error("CarrySettle with a memory backend: a carrier; want nil")
	}
	carry := carrySettle(b, be)
	if carry == nil {
		t.Fatal("CarrySettle = nil for a backend on the broker's own single server; want a carrier")
	}
	// Warm up: the server caches the script.
	if err := b.Publish(ctx, driver.Message{ID: "w", Queue: "warm", Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	warm := fetchOne(ctx, t, b, "warm")
	if errs := carry(ctx, []*driver.Delivery{warm}, []*driver.TaskState{{TaskUUID: "w", State: driver.StateSuccess}}); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	ids := []string{rand.Text(), rand.Text(), rand.Text()}
	for _, id := range ids {
		if err := b.Publish(ctx, driver.Message{ID: id, Queue: "s", Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	lost, err := b.Fetch(ctx, "s", 1, time.Millisecond)
	if err != nil || len(lost) != 1 {
		t.Fatalf("fetch: %v, %v", lost, err)
	}
	var ds []*driver.Delivery
	for len(ds) < 3 { // the lost one comes again once its lease ran out
		got, err := b.Fetch(ctx, "s", 3-len(ds), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	settle := append([]*driver.Delivery{lost[0]}, ds...)
	sts := make([]*driver.TaskState, len(settle))
	for i, d := range settle {
		sts[i] = &driver.TaskState{TaskUUID: d.ID + "-task", TaskName: "t", State: driver.StateSuccess, CreatedAt: time.Now().UTC()}
	}
	before, _ := b.Stats(ctx, "s")
	c.reset()
	errs := carry(ctx, settle, sts)
	if n := c.singles.Load() + c.pipes.Load(); n != 1 {
		t.Errorf("a carried settle of %d deliveries made %d round trips; want 1", len(settle), n)
	}
	if len(errs) != len(settle) || !errors.Is(errs[0], driver.ErrLeaseLost) {
		t.Fatalf("carried settle answered %v; want ErrLeaseLost for the stale delivery first", errs)
	}
	for i, err := range errs[1:] {
		if err != nil {
			t.Errorf("delivery %d: %v; want acked", i+1, err)
		}
	}
	for i, st := range sts {
		if got := be.state(ctx, t, st.TaskUUID); got != driver.StateSuccess {
			t.Errorf("state %d after a carried settle: %q; want SUCCESS (written even for a lost lease)", i, got)
		}
	}
	after, err := b.Stats(ctx, "s")
	if err != nil || after.InFlight != 0 || after.Pending != 0 || after.Completed-before.Completed != 3 {
		t.Fatalf("queue after the carried settle: %+v (before %+v), %v; want nothing in flight or pending, 3 more completed", after, before, err)
	}
}

// TestCarryStart: with errand's Redis backend on its own single server,
// one fetch round trip leases and starts: a Go-encoded PENDING is
// followed (its created_at kept, STARTED decodable), a state of another
// layout is read with cjson (a SUCCESS refused), a task whose name JSON
// would escape is not tried, a redelivery is started again, a retry whose
// state carries a progress object keeps its created_at (and its previous
// state its progress); a cluster gets no carrier.
func TestCarryStart(t *testing.T) {
	srv := servers(t)
	if b, be := redisbroker.New(srv["Cluster"], nil), newSameServerBackend(t, srv["Cluster"], "errand-test-start"); carryStart(b, be) != nil {
		t.Error("CarryStart on a Redis Cluster: a carrier; want nil (the script cannot reach the state keys)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, c := countedClient(t, "Single")
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := newSameServerBackend(t, rdb, prefix)
	fetch := carryStart(b, be)
	if fetch == nil {
		t.Fatal("CarryStart = nil for a backend on the broker's own single server; want a carrier")
	}
	// Warm up: the server caches the scripts.
	if err := b.Publish(ctx, driver.Message{ID: "w", Queue: "s", Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := fetch(ctx, "s", 1, time.Second, nil); err != nil { // and the queue registered
		t.Fatal(err)
	}
	created := "2020-01-02T03:04:05.678Z"
	pending, other, odd, plain, prog := "p-"+rand.Text(), "o-"+rand.Text(), "e-"+rand.Text(), "n-"+rand.Text(), "g-"+rand.Text()
	const progress = `{"done":3,"of":[10],"note":"created_at"}`
	rdb.Set(ctx, be.key(prog), `{"task_uuid":"`+prog+`","task_name":"t","state":"RETRY","attempt":2,"created_at":"`+created+`","started_at":"`+created+`","progress":`+progress+`}`, time.Minute)
	rdb.Set(ctx, be.key(pending), `{"task_uuid":"`+pending+`","task_name":"t","state":"PENDING","attempt":1,"created_at":"`+created+`"}`, time.Minute)
	rdb.Set(ctx, be.key(other), `{"state":"SUCCESS", "task_uuid":"`+other+`", "task_name":"t", "attempt":1}`, time.Minute)
	msgs := []driver.Message{
		{ID: pending, Queue: "s", Body: []byte("1"), Task: "t", TaskAttempt: 1},
		{ID: other, Queue: "s", Body: []byte("2"), Task: "t", TaskAttempt: 1},
		{ID: odd, Queue: "s", Body: []byte("3"), Task: `t"<`, TaskAttempt: 1},
		{ID: plain, Queue: "s", Body: []byte("4"), Task: "t", TaskAttempt: 1},
		{ID: prog, Queue: "s", Body: []byte("5"), Task: "t", TaskAttempt: 2},
	}
	if err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	c.reset()
	ds, starts, at, err := fetch(ctx, "s", 5, time.Minute, []string{"t", `t"<`})
	if err != nil || len(ds) != 5 || len(starts) != 5 {
		t.Fatalf("carried fetch: %d deliveries, %d starts, %v; want 5 each", len(ds), len(starts), err)
	}
	if n := c.singles.Load() + c.pipes.Load(); n != 1 {
		t.Errorf("a carried fetch of 5 made %d round trips; want 1", n)
	}
	if at.IsZero() || time.Since(at).Abs() > time.Minute {
		t.Errorf("carried fetch time %v; want the server's now", at)
	}
	for i, d := range ds {
		st := starts[i]
		switch d.ID {
		case pending:
			if st == nil || !st.Written || st.Prev == nil || st.Prev.State != driver.StatePending {
				t.Fatalf("PENDING task: start %+v; want written over PENDING", st)
			}
			v, _ := rdb.Get(ctx, be.key(pending)).Result()
			var got driver.TaskState
			if err := json.Unmarshal([]byte(v), &got); err != nil || got.State != driver.StateStarted || got.TaskName != "t" || got.Attempt != 1 ||
				got.CreatedAt.Format(time.RFC3339Nano) != created || !got.StartedAt.Equal(at) {
				t.Errorf("STARTED written as %s (%v); want STARTED of t, attempt 1, created %s, started %v", v, err, created, at)
			}
		case prog:
			if st == nil || !st.Written || st.Prev == nil || st.Prev.State != driver.StateRetry || string(st.Prev.Progress) != progress {
				t.Fatalf("RETRY task with progress: start %+v; want written over RETRY, its progress %s kept in Prev", st, progress)
			}
			v, _ := rdb.Get(ctx, be.key(prog)).Result()
			var got driver.TaskState
			if err := json.Unmarshal([]byte(v), &got); err != nil || got.State != driver.StateStarted || got.Attempt != 2 ||
				got.CreatedAt.Format(time.RFC3339Nano) != created {
				t.Errorf("STARTED over a RETRY with progress written as %s (%v); want STARTED, attempt 2, its created_at %s kept", v, err, created)
			}
		case other:
			if st == nil || st.Written || st.Prev == nil || st.Prev.State != driver.StateSuccess {
				t.Errorf("SUCCESS task (another layout): start %+v; want refused, with SUCCESS", st)
			}
			if s := be.state(ctx, t, other); s != driver.StateSuccess {
				t.Errorf("SUCCESS task left %q", s)
			}
		case odd:
			if st != nil {
				t.Errorf("a task whose name JSON escapes: start %+v; want none (started by Start)", st)
			}
		case plain:
			if st == nil || !st.Written || st.Prev != nil || be.state(ctx, t, plain) != driver.StateStarted {
				t.Errorf("a task with no state: start %+v; want written, no previous state", st)
			}
		}
	}
	// A redelivery is started by its fetch too: STARTED again, it being
	// no first delivery.
	var redo *driver.Delivery
	for _, d := range ds {
		if d.ID == plain {
			redo = d
		}
	}
	if err := b.Release(ctx, redo, time.Time{}); err != nil {
		t.Fatal(err)
	}
	again, starts, _, err := fetch(ctx, "s", 1, time.Minute, []string{"t"})
	if err != nil || len(again) != 1 || again[0].Attempt != 2 || len(starts) != 1 || starts[0] == nil || !starts[0].Written ||
		starts[0].Prev == nil || starts[0].Prev.State != driver.StateStarted {
		t.Fatalf("redelivery: %v, starts %v, %v; want delivered again (attempt 2) and started over its STARTED", again, starts, err)
	}
}

// TestCarrySettlePriority: a carried settle forgets a message's priority
// (K:prio) with the rest of it when the delivery has one, and a batch of
// deliveries without priorities leaves the priorities of others alone.
func TestCarrySettlePriority(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, _ := countedClient(t, "Single")
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := newSameServerBackend(t, rdb, prefix)
	settle := carrySettle(b, be)
	if settle == nil {
		t.Fatal("CarrySettle = nil for a backend on the broker's own single server")
	}
	prio := "{" + prefix + ":s}:prio"
	for i, p := range []uint8{0, 7, 0} {
		if err := b.Publish(ctx, driver.Message{ID: "t" + strconv.Itoa(i), Queue: "s", Body: []byte("x"), Priority: p}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rdb.HLen(ctx, prio).Result(); err != nil || n != 1 {
		t.Fatalf("K:prio holds %d, %v after publishing one message of priority 7; want 1", n, err)
	}
	ds, err := b.Fetch(ctx, "s", 3, time.Minute)
	if err != nil || len(ds) != 3 || ds[0].Priority != 7 {
		t.Fatalf("fetch: %v, %v; want 3 deliveries, the one of priority 7 first", ds, err)
	}
	sts := func(ds ...*driver.Delivery) []*driver.TaskState {
		out := make([]*driver.TaskState, len(ds))
		for i, d := range ds {
			out[i] = &driver.TaskState{TaskUUID: d.ID, TaskName: "t", State: driver.StateSuccess, CreatedAt: time.Now().UTC()}
		}
		return out
	}
	if errs := settle(ctx, ds[1:2], sts(ds[1])); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	if n, err := rdb.HLen(ctx, prio).Result(); err != nil || n != 1 {
		t.Fatalf("K:prio holds %d, %v after settling a delivery of priority 0; want 1 (the other's priority kept)", n, err)
	}
	if errs := settle(ctx, []*driver.Delivery{ds[0], ds[2]}, sts(ds[0], ds[2])); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	if n, err := rdb.HLen(ctx, prio).Result(); err != nil || n != 0 {
		t.Fatalf("K:prio holds %d, %v after settling the delivery of priority 7; want 0", n, err)
	}
	if st, err := b.Stats(ctx, "s"); err != nil || st.InFlight != 0 || st.Pending != 0 || st.Completed != 3 {
		t.Fatalf("queue after the settles: %+v, %v; want 3 completed, nothing left", st, err)
	}
}

// TestCarryStartOnlyNamedTasks: a carried fetch starts only the tasks
// spec.Tasks names, by whole name: not one whose name is part of a named
// one, nor one a name with a newline could seem to contain.
func TestCarryStartOnlyNamedTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, _ := countedClient(t, "Single")
	prefix := freshPrefix(t, rdb)
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := newSameServerBackend(t, rdb, prefix)
	fetch := carryStart(b, be)
	if fetch == nil {
		t.Fatal("CarryStart = nil on a single server; want a carrier")
	}
	named := map[string]bool{"a": true, "abc": false, "b": false, "c": false}
	var msgs []driver.Message
	for name := range named {
		msgs = append(msgs, driver.Message{ID: name + "-" + rand.Text(), Queue: "s", Body: []byte(name), Task: name, TaskAttempt: 1})
	}
	if err := b.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	ds, starts, _, err := fetch(ctx, "s", len(msgs), time.Minute, []string{"a", "ab", "x\nb\ny", "", "bc"})
	if err != nil || len(ds) != len(msgs) || len(starts) != len(msgs) {
		t.Fatalf("carried fetch: %d deliveries, %d starts, %v; want %d each", len(ds), len(starts), err, len(msgs))
	}
	for i, d := range ds {
		name := string(d.Body)
		if started := starts[i] != nil; started != named[name] {
			t.Errorf("task %q: started %v; want %v (spec names a, ab, bc and x\\nb\\ny)", name, started, named[name])
		}
	}
}

package redisbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

var _ driver.PendingCarrier = (*Broker)(nil)

// pendingSource is what CarryPending needs of a backend: the client it
// writes through, and its SetPendingIfAbsent commands queued on a pipeline
// without sending them. errand's Redis result backend
// (redisbackend.Backend) has both; the broker matches them by shape, so
// that neither driver module requires the other.
type pendingSource interface {
	Client() goredis.UniversalClient
	QueuePendingIfAbsent(ctx context.Context, pipe goredis.Pipeliner, sts []*driver.TaskState) error
}

// CarryPending returns a driver.PublishPendingFunc that records be's
// PENDING states in the pipeline of the publish, when be is errand's Redis
// backend on the broker's own server (redisconn.SameServer: the same
// client, or clients of equal address, DB and user, or of the same
// cluster); nil otherwise. It does no I/O.
//
// The function checks msgs as Publish does (nothing is sent if one is
// refused), then sends one pipeline: first the backend's SET ... NX PX of
// every state (PENDING only where a task has no state yet), then the
// SADD of the queues and one publish script per queue, exactly as
// Publish. That is one round trip on a single node (two on a server that
// has not cached the publish script yet: the refused scripts alone are
// sent again with their source; the SET NX would be harmless twice, but
// are not sent twice). On a Redis Cluster go-redis splits the pipeline by
// node: one round trip per node holding a state or a queue, in parallel.
// On one node the states go before the messages, so a worker never fetches
// a message whose PENDING is still to come; across nodes there is no such
// order, and none is needed (the backend writes PENDING only where
// absent).
//
// published is true when every publish script succeeded; the error then
// comes from the states alone (a state that cannot be encoded, or a SET
// that failed), and a failed SADD of the queue set is not reported: the
// messages are queued, and a worker's Fetch adds its queue to the set
// anyway.
func (b *Broker) CarryPending(be driver.Backend) driver.PublishPendingFunc {
	src, ok := be.(pendingSource)
	if !ok || !redisconn.SameServer(b.rdb, src.Client()) {
		return nil
	}
	return func(ctx context.Context, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
		return b.publishPending(ctx, src, sts, msgs)
	}
}

// publishPending is the function CarryPending returns for src.
func (b *Broker) publishPending(ctx context.Context, src pendingSource, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	batch, err := b.preparePublish(msgs)
	if err != nil {
		return false, err
	}
	var encodeErr error // a state that could not be encoded: none queued
	cmds, err := b.sendBatch(ctx, batch, func(pipe goredis.Pipeliner) {
		encodeErr = src.QueuePendingIfAbsent(ctx, pipe, sts)
	})
	if err != nil {
		return false, b.err(ctx, err)
	}
	if encodeErr != nil {
		return true, encodeErr
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && e != goredis.Nil {
			return true, b.err(ctx, fmt.Errorf("PENDING states: %w", e))
		}
	}
	return true, nil
}

var _ driver.SettleCarrier = (*Broker)(nil)

// stateSource is what CarrySettle needs of a backend: the client it
// writes through, and the key, encoding and expiry its SetStates writes
// for a state. errand's Redis result backend (redisbackend.Backend) has
// both; the broker matches them by shape, as for pendingSource.
type stateSource interface {
	Client() goredis.UniversalClient
	StateEntry(st *driver.TaskState) (key string, value []byte, expiry time.Duration, err error)
}

// CarrySettle returns a driver.SettleFunc that writes be's final states
// in the script of the ack, when be is errand's Redis backend on the
// broker's own single Redis server (redisconn.SameServer and oneNode, not
// a Redis Cluster or a Ring: a task's state key and the queue's keys live
// in different hash slots or shards there, and one script cannot touch
// both); nil otherwise. It does no I/O.
//
// The function runs ackStatesScript once per call (its deliveries are of
// one queue): per delivery, SET ... PX of the state, then the ack, exactly
// as Ack; a delivery whose state cannot be encoded fails alone, neither
// written nor acked.
func (b *Broker) CarrySettle(be driver.Backend) driver.SettleFunc {
	src, ok := be.(stateSource)
	if !ok || !redisconn.SameServer(b.rdb, src.Client()) {
		return nil
	}
	if !oneNode(b.rdb) {
		return nil
	}
	return func(ctx context.Context, ds []*driver.Delivery, sts []*driver.TaskState) []error {
		return b.ackStates(ctx, src, ds, sts)
	}
}

// ackStates is the function CarrySettle returns for src.
func (b *Broker) ackStates(ctx context.Context, src stateSource, ds []*driver.Delivery, sts []*driver.TaskState) []error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	errs := make([]error, len(ds))
	if len(sts) != len(ds) {
		return driver.BatchErrors(len(ds), fmt.Errorf("redis broker: %d states for %d deliveries", len(sts), len(ds)))
	}
	var (
		idx    []int
		states []string
		queue  string
		expiry time.Duration
	)
	args := make([]any, 3, 3+3*len(ds))
	prioritized := 0 // '1' when a delivery came with a priority: its K:prio entry goes too
	for i, d := range ds {
		h, ok := d.Handle.(handle)
		if !ok {
			errs[i] = fmt.Errorf("redis broker: delivery %q was not fetched from this broker", d.ID)
			continue
		}
		if len(idx) > 0 && d.Queue != queue {
			errs[i] = fmt.Errorf("redis broker: delivery %q is of queue %q, not %q: one carried settle is of one queue", d.ID, d.Queue, queue)
			continue
		}
		key, v, exp, err := src.StateEntry(sts[i])
		if err != nil {
			errs[i] = err
			continue
		}
		queue, expiry = d.Queue, exp
		idx = append(idx, i)
		states = append(states, key)
		args = append(args, h.mid, h.token, v)
		if d.Priority > 0 {
			prioritized = 1
		}
	}
	if len(idx) == 0 {
		return errs
	}
	args[0], args[1], args[2] = b.opts.CompletedMax, expiry.Milliseconds(), prioritized
	k := b.keys(queue)
	acked, err := honourCancel(ctx, func() ([]int64, error) {
		return ackStatesScript.Run(ctx, b.scripts, k.ackStatesKeys(states), args...).Int64Slice()
	})
	if err == nil && len(acked) != len(idx) {
		err = fmt.Errorf("redis broker: ackStates script answered %d results for %d deliveries", len(acked), len(idx))
	}
	for j, i := range idx {
		switch {
		case err != nil:
			errs[i] = b.err(ctx, err)
		case acked[j] == leaseLost:
			errs[i] = fmt.Errorf("redis broker: message %q: %w", ds[i].ID, driver.ErrLeaseLost)
		}
	}
	return errs
}

// oneNode reports whether rdb reaches a single Redis node, where a script
// may touch keys it builds itself: a *goredis.Client (a failover client
// too). A Cluster or a Ring spreads keys over nodes by their hash, so a
// script run on the queue's node would write a task's state where the
// backend never reads it; another UniversalClient is not known.
func oneNode(rdb goredis.UniversalClient) bool {
	_, ok := rdb.(*goredis.Client)
	return ok
}

var _ driver.StartCarrier = (*Broker)(nil)

// startSource is what CarryStart needs of a backend: the client it writes
// through, the key of a task's state and its result expiry. errand's
// Redis result backend (redisbackend.Backend) has them; the broker
// matches them by shape, as for pendingSource.
type startSource interface {
	Client() goredis.UniversalClient
	StateKey(id string) string
	ResultExpiry() time.Duration
}

// CarryStart returns a driver.FetchStartFunc that begins attempts in be's
// states in the fetch script, when be is errand's Redis backend on the
// broker's own single Redis server (as CarrySettle: not a Redis Cluster,
// where a task's state key and the queue's keys live in different hash
// slots); nil otherwise. It does no I/O.
//
// Once it has returned a carrier, the broker's publish names each
// message with a Task and a TaskAttempt by an ID that carries them
// (messageID). The carried fetch runs fetchScript with the backend's key
// prefix, its expiry and spec.Tasks: for each message it leases whose ID
// names a task of spec.Tasks, it reads the task's state, applies
// driver.Starter's table (luaStart's begin) and writes STARTED, in the
// same script. A message published before, by a broker that returned no
// carrier, or requeued from the archive, is delivered unstarted.
//
// The script touches the backend's task keys, which it builds from the
// prefix rather than receiving as KEYS: allowed on a single Redis server,
// which is why a cluster gets no carrier.
func (b *Broker) CarryStart(be driver.Backend) driver.FetchStartFunc {
	src, ok := be.(startSource)
	if !ok || !redisconn.SameServer(b.rdb, src.Client()) {
		return nil
	}
	if !oneNode(b.rdb) {
		return nil
	}
	b.carriesStarts.Store(true) // from now on publish names tasks in message IDs
	prefix := src.StateKey("")
	return func(ctx context.Context, queue string, limit int, lease time.Duration, spec driver.StartSpec) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
		args := []any{prefix, src.ResultExpiry().Milliseconds(), startableArg(spec.Tasks)}
		return b.fetch(ctx, queue, limit, lease, args)
	}
}

// startableArg is fetchScript's ARGV[10]: names, each between newlines,
// which the script searches as one string (one argument, no table built
// per call, however many tasks the worker has). A name with a newline is
// left out: it is never carried in a message ID (plainJSON), and inside
// the string it could make a part of itself look startable.
func startableArg(names []string) string {
	var sb strings.Builder
	sb.WriteByte('\n')
	for _, n := range names {
		if n != "" && !strings.ContainsRune(n, '\n') {
			sb.WriteString(n)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// messageID is the ID under which publish keeps m: random, and, once
// CarryStart has returned a carrier, followed by what the fetch script
// needs to start m's task without decoding its body — ":attempt:name"
// (begin reads it back) — for a message with a Task and a TaskAttempt
// whose ID and Task JSON writes as they are (begin writes them into the
// STARTED state's JSON unchanged; any other is started by Start). The
// message keeps that ID through every delivery: a redelivery is started
// by its fetch too.
func (b *Broker) messageID(m driver.Message) string {
	var r [12]byte
	rand.Read(r[:])
	var h [24]byte
	hex.Encode(h[:], r[:])
	if !b.carriesStarts.Load() || m.Task == "" || m.TaskAttempt < 1 || !plainJSON(m.ID) || !plainJSON(m.Task) {
		return string(h[:])
	}
	var sb strings.Builder
	sb.Grow(len(h) + 2 + 20 + len(m.Task))
	sb.Write(h[:])
	sb.WriteByte(':')
	var num [20]byte
	sb.Write(strconv.AppendInt(num[:0], int64(m.TaskAttempt), 10))
	sb.WriteByte(':')
	sb.WriteString(m.Task)
	return sb.String()
}

// plainJSON reports whether encoding/json writes s between its quotes as
// it is: printable ASCII without '"', '\\' or the HTML characters it
// escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

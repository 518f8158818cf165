package redisbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
	"github.com/errand-go/errand/internal/statejson"
)

var _ driver.Colocator = (*Broker)(nil)

// Colocate returns the broker's one-trip calls for be (driver.Colocator)
// when be declares its task states on the broker's own single Redis
// server: its Location is a *redisconn.States (errand's Redis result
// backend) whose client reaches the broker's data (redisconn.SameServer:
// the same client, or clients of equal address, DB and user) on one node
// (oneNode: not a Redis Cluster or a Ring, where a task's state key and
// the queue's keys live in different hash slots or shards, and one script
// cannot touch both). Otherwise it answers nil, and errand takes the
// portable path. It does no I/O.
//
// Once it has answered non-nil, the broker's publish names each message
// with a Task and a TaskAttempt by an ID that carries them (messageID),
// for FetchStart.
func (b *Broker) Colocate(be driver.Backend) driver.Colocation {
	l, ok := be.(driver.Located)
	if !ok {
		return nil
	}
	st, ok := l.Location().(*redisconn.States)
	if !ok || st == nil || !redisconn.SameServer(b.rdb, st.Client) || !oneNode(b.rdb) {
		return nil
	}
	b.carriesStarts.Store(true) // from now on publish names tasks in message IDs
	return &colocation{b: b, st: st}
}

// colocation is the broker's driver.Colocation for the states st.
type colocation struct {
	b  *Broker
	st *redisconn.States
	// names caches FetchStart's last tasks and their startableArg.
	names atomic.Pointer[startable]
}

// startable is one list of task names and its startableArg.
type startable struct {
	tasks []string
	arg   string
}

// Send sends one pipeline: first the backend's SET ... NX PX of every
// state (PENDING only where a task has no state yet), then the SADD of
// the queues and one publish script per queue, exactly as Publish, after
// checking msgs as Publish does (nothing is sent if one is refused). That
// is one round trip (two on a server that has not cached the publish
// script yet: the refused scripts alone are sent again with their source;
// the SET NX would be harmless twice, but are not sent twice). The states
// go before the messages, so a worker never fetches a message whose
// PENDING is still to come.
//
// published is true when every publish script succeeded; the error then
// comes from the states alone (a state that cannot be encoded, or a SET
// that failed), and a failed SADD of the queue set is not reported: the
// messages are queued, and a worker's Fetch adds its queue to the set
// anyway.
func (c *colocation) Send(ctx context.Context, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
	return c.b.publishPending(ctx, c.st, sts, msgs)
}

// publishPending is colocation.Send.
func (b *Broker) publishPending(ctx context.Context, st *redisconn.States, sts []*driver.TaskState, msgs []driver.Message) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	batch, err := b.preparePublish(msgs)
	if err != nil {
		return false, err
	}
	var encodeErr error // a state that could not be encoded: none queued
	cmds, err := b.sendBatch(ctx, batch, func(pipe goredis.Pipeliner) {
		if err := st.QueueStates(ctx, pipe, sts, true); err != nil {
			encodeErr = fmt.Errorf("redis broker: %w", err)
		}
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

// Settle runs ackStatesScript once per call (its deliveries are of one
// queue): per delivery, SET ... PX of the state, then the ack, exactly as
// Ack; a delivery whose state cannot be encoded fails alone, neither
// written nor acked. A state is not written over its task's CANCELLED:
// its delivery is acked, and answers an error wrapping
// driver.ErrCancelled (driver.Colocation).
func (c *colocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*driver.TaskState) []error {
	return c.b.ackStates(ctx, c.st, ds, sts)
}

// ackStates is colocation.Settle.
func (b *Broker) ackStates(ctx context.Context, st *redisconn.States, ds []*driver.Delivery, sts []*driver.TaskState) []error {
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
		v, err := statejson.Marshal(sts[i])
		if err != nil {
			errs[i] = fmt.Errorf("redis broker: encode state of %s: %w", sts[i].TaskUUID, err)
			continue
		}
		key := st.StateKey(sts[i].TaskUUID)
		queue, expiry = d.Queue, st.Expiry
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
		case acked[j] == ackCancelled:
			errs[i] = fmt.Errorf("redis broker: task %s: %s not written: %w", sts[i].TaskUUID, sts[i].State, driver.ErrCancelled)
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

// FetchStart runs fetchScript with the backend's state key prefix, its
// expiry and tasks: for each message it leases whose ID names a task of
// tasks (messageID), it reads the task's state, applies driver.Starter's
// table (luaStart's begin) and writes STARTED, in the same script. A
// message published before Colocate answered, by a broker that was not
// co-located, or requeued from the archive, is delivered unstarted.
//
// The script touches the backend's task keys, which it builds from the
// prefix rather than receiving as KEYS: allowed on a single Redis server,
// which is why Colocate answers nil on a cluster.
func (c *colocation) FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	args := []any{c.st.StatePrefix(), c.st.Expiry.Milliseconds(), c.startable(tasks)}
	return c.b.fetch(ctx, queue, limit, lease, args)
}

// startable returns startableArg(tasks), made once per list: errand
// passes the same slice until its tasks change.
func (c *colocation) startable(tasks []string) string {
	if p := c.names.Load(); p != nil && sameSlice(p.tasks, tasks) {
		return p.arg
	}
	p := &startable{tasks: tasks, arg: startableArg(tasks)}
	c.names.Store(p)
	return p.arg
}

// sameSlice reports whether a and b are the same slice (the same array,
// length and capacity), not just equal.
func sameSlice(a, b []string) bool {
	if len(a) != len(b) || cap(a) != cap(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
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
// Colocate has answered non-nil, followed by what the fetch script
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

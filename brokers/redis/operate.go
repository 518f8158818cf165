package redisbroker

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The calls below return when ctx is cancelled even while Redis is silent
// (see honourCancel): errand's worker polls Paused and beats in the
// background, and its Shutdown must not wait for them.

// Queues returns the queues published to that still hold something: the
// set P:queues, which every Publish, Requeue and Fetch adds its queue to
// in its own round trip, so the set heals within one publish or fetch of
// any process whatever emptied it (a Redis restarted without persistence,
// a FLUSHDB, a failover to a replica that had not received it). So that
// the queues of an older version (which kept no P:queues) are listed
// too, the first call on a Broker value also scans the keyspace (every
// master of a cluster) for the keys of queues — K:pending, K:ppending,
// K:delayed, K:inflight, K:dead, K:archive — and adds what it finds to
// P:queues.
//
// A queue of which nothing remains leaves the set: each call takes out of
// P:queues the queues with no message pending, scheduled or in flight, an
// empty archive, and no completed message acked within
// Options.CompletedMaxAge (unlistScript, SREM, relistScript: a publish
// racing the removal puts the queue back, see scripts.go). It deletes
// nothing: completed messages stay, bounded by CompletedMax, and the
// archive keeps its own retention. A paused queue stays listed. A queue
// used once is so listed until its archive is emptied and its last
// completed message is CompletedMaxAge old; KnowsQueue still knows it
// after. This costs four
// pipelined round trips (one per node on a cluster) over the listed
// queues; it is an operator's call.
func (b *Broker) Queues(ctx context.Context) ([]string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if !b.discovered.Load() {
		if _, err := honourCancel(ctx, func() (struct{}, error) { return struct{}{}, b.discover(ctx) }); err != nil {
			return nil, b.err(ctx, err)
		}
		b.discovered.Store(true)
	}
	qs, err := honourCancel(ctx, func() ([]string, error) {
		qs, err := b.rdb.SMembers(ctx, b.global("queues")).Result()
		if err != nil {
			return nil, err
		}
		return b.unlistEmpty(ctx, qs)
	})
	return qs, b.err(ctx, err)
}

// KnowsQueue reports whether queue was used: it is in P:queues, or a key
// of it remains — a message queued, in flight or archived, a completed
// message, the count of its acks or deliveries, or the mark K:unlisted
// that Queues leaves on a queue it took out of the set for being empty.
// So a queue idle for CompletedMaxAge, which Queues no longer lists, is
// still known, and errand's Server.Queue answers its counts. False for a
// name never used, and once the server has lost the queue's data (a
// FLUSHDB, a restart without persistence) until its next publish or
// fetch. One pipeline (SISMEMBER, EXISTS): one round trip, one per node
// on a cluster, where the set and the queue's keys hash to different
// slots.
func (b *Broker) KnowsQueue(ctx context.Context, queue string) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	k := b.keys(queue)
	known, err := honourCancel(ctx, func() (bool, error) {
		pipe := b.rdb.Pipeline()
		listed := pipe.SIsMember(ctx, b.global("queues"), queue)
		kept := pipe.Exists(ctx, k.unlisted, k.pending, k.ppending, k.delayed, k.inflight,
			k.archive, k.done, k.acked, k.seq, k.dead)
		if _, err := pipe.Exec(ctx); err != nil {
			return false, err
		}
		return listed.Val() || kept.Val() > 0, nil
	})
	return known, b.err(ctx, err)
}

// unlistEmpty takes out of P:queues those of all of which nothing remains
// (see Queues), paused queues excepted, and returns the others.

// doneAge is unlistScript's bound on completed messages (ms; 0: none may
// remain).
func (b *Broker) doneAge() int64 { return max(b.opts.CompletedMaxAge.Milliseconds(), 0) }
func (b *Broker) unlistEmpty(ctx context.Context, all []string) ([]string, error) {
	if len(all) == 0 {
		return all, nil
	}
	// A paused queue stays listed, empty or not: an operator must be able
	// to see it and resume it.
	paused, err := b.rdb.SMembers(ctx, b.global("paused")).Result()
	if err != nil {
		return nil, err
	}
	var qs, keep []string
	for _, q := range all {
		if slices.Contains(paused, q) {
			keep = append(keep, q)
		} else {
			qs = append(qs, q)
		}
	}
	marks := make([]*goredis.Cmd, len(qs))
	if len(qs) > 0 {
		if _, err := b.pipelined(ctx, func(pipe goredis.Pipeliner, eval evalFunc) {
			for i, q := range qs {
				marks[i] = eval(unlistScript, ctx, pipe, b.keys(q).unlistKeys(), b.doneAge())
			}
		}); err != nil {
			return nil, err
		}
	}
	var empty []string
	kept := append(make([]string, 0, len(all)), keep...)
	for i, q := range qs {
		if n, _ := marks[i].Int(); n == 1 {
			empty = append(empty, q)
		} else {
			kept = append(kept, q)
		}
	}
	if len(empty) == 0 {
		slices.Sort(kept)
		return kept, nil
	}
	if err := b.rdb.SRem(ctx, b.global("queues"), anys(empty)...).Err(); err != nil {
		return nil, err
	}
	relists := make([]*goredis.Cmd, len(empty))
	if _, err := b.pipelined(ctx, func(pipe goredis.Pipeliner, eval evalFunc) {
		for i, q := range empty {
			relists[i] = eval(relistScript, ctx, pipe, b.keys(q).relistKeys(), b.doneAge())
		}
	}); err != nil {
		// Unknown whether a publish came: put them all back.
		b.rdb.SAdd(ctx, b.global("queues"), anys(empty)...)
		return nil, err
	}
	var back []string
	for i, q := range empty {
		if n, _ := relists[i].Int(); n == 1 {
			back = append(back, q)
		}
	}
	if len(back) > 0 {
		if err := b.rdb.SAdd(ctx, b.global("queues"), anys(back)...).Err(); err != nil {
			return nil, err
		}
		kept = append(kept, back...)
	}
	slices.Sort(kept)
	return kept, nil
}

// queueSuffixes end the keys by which discover recognises a queue.
var queueSuffixes = []string{":pending", ":ppending", ":delayed", ":inflight", ":dead", ":archive"}

// scanCount is the COUNT hint of each SCAN of discover: keys a node looks
// at per call.
const scanCount = 1000

// discover scans for the keys of queues under the prefix and adds their
// queues to P:queues.
func (b *Broker) discover(ctx context.Context) error {
	start := "{" + b.opts.Prefix + ":"
	pattern := "{" + globEscape(b.opts.Prefix) + ":*}:*"
	var mu sync.Mutex
	found := map[string]bool{}
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, scanCount).Iterator()
		for it.Next(ctx) {
			key := it.Val()
			for _, suf := range queueSuffixes {
				if q, ok := strings.CutSuffix(key, suf); ok && strings.HasPrefix(q, start) && strings.HasSuffix(q, "}") {
					mu.Lock()
					found[q[len(start):len(q)-1]] = true
					mu.Unlock()
					break
				}
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := b.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, b.rdb)
	}
	if err != nil || len(found) == 0 {
		return err
	}
	qs := make([]any, 0, len(found))
	for q := range found {
		qs = append(qs, q)
	}
	return b.rdb.SAdd(ctx, b.global("queues"), qs...).Err()
}

// globEscape escapes the characters special to SCAN's MATCH pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// Pause adds queue to the set of paused queues (P:paused), which lasts
// until Resume. Fetch does not read it; errand's workers poll Paused.
func (b *Broker) Pause(ctx context.Context, queue string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (int64, error) { return b.rdb.SAdd(ctx, b.global("paused"), queue).Result() })
	return b.err(ctx, err)
}

// Resume removes queue from the set of paused queues.
func (b *Broker) Resume(ctx context.Context, queue string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (int64, error) { return b.rdb.SRem(ctx, b.global("paused"), queue).Result() })
	return b.err(ctx, err)
}

// Paused returns the paused queues.
func (b *Broker) Paused(ctx context.Context) ([]string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	qs, err := honourCancel(ctx, func() ([]string, error) { return b.rdb.SMembers(ctx, b.global("paused")).Result() })
	return qs, b.err(ctx, err)
}

// Beat stores data for worker id in P:workers with its expiry (now + ttl
// by the server's clock) in P:beats, in one script that also drops the
// workers whose ttl ran out.
func (b *Broker) Beat(ctx context.Context, id string, data []byte, ttl time.Duration) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return beatScript.Run(ctx, b.scripts, b.beatKeys(), id, data, ttl.Milliseconds()).Result()
	})
	return b.err(ctx, err)
}

// Beats drops the workers whose ttl ran out and returns the data of the
// others, in one script.
func (b *Broker) Beats(ctx context.Context) ([][]byte, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ss, err := honourCancel(ctx, func() ([]string, error) { return beatsScript.Run(ctx, b.scripts, b.beatKeys()).StringSlice() })
	if err != nil {
		return nil, b.err(ctx, err)
	}
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out, nil
}

// Unbeat removes worker id at once.
func (b *Broker) Unbeat(ctx context.Context, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return unbeatScript.Run(ctx, b.scripts, b.beatKeys(), id).Result()
	})
	return b.err(ctx, err)
}

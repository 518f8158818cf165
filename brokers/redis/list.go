package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
)

// List returns a page of queue in state, in one call: pending in delivery
// order (foreign text on the list with an empty ID, as Pending), scheduled
// by due time (At and NotBefore: the due time), in flight in delivery
// order (At zero), and
// completed newest first (At: the ack time, by the server's clock) among
// the last Options.CompletedMax acks.
func (b *Broker) List(ctx context.Context, queue string, state driver.ListState, offset, limit int) ([]driver.Listed, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if offset < 0 || limit < 1 {
		return nil, fmt.Errorf("redis broker: List: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	k := b.keys(queue)
	start, stop := offset, offset+limit-1
	if state == driver.ListCompleted {
		ss, err := b.rdb.LRange(ctx, k.done, int64(start), int64(stop)).Result()
		if err != nil {
			return nil, b.err(ctx, err)
		}
		out := make([]driver.Listed, 0, len(ss))
		for _, s := range ss {
			ms, env, _ := strings.Cut(s, "\n")
			at, _ := strconv.ParseInt(ms, 10, 64)
			id, body, _ := strings.Cut(env, "\n")
			out = append(out, driver.Listed{Message: driver.Message{ID: id, Queue: queue, Body: []byte(body)}, At: time.UnixMilli(at)})
		}
		return out, nil
	}
	switch state {
	case driver.ListPending:
		return b.pendingPage(ctx, queue, start, stop) // by priority, then FIFO
	case driver.ListScheduled:
		res, err := scheduledScript.Run(ctx, b.scripts, k.scheduledKeys(), start, stop).StringSlice()
		if err != nil {
			return nil, b.err(ctx, err)
		}
		out := make([]driver.Listed, 0, len(res)/2)
		for i := 0; i+1 < len(res); i += 2 {
			id, body, _ := strings.Cut(res[i], "\n")
			due, _ := strconv.ParseFloat(res[i+1], 64)
			at := time.UnixMilli(int64(due))
			out = append(out, driver.Listed{Message: driver.Message{ID: id, Queue: queue, Body: []byte(body), NotBefore: at}, At: at})
		}
		return out, nil
	case driver.ListInFlight:
		res, err := inflightScript.Run(ctx, b.scripts, k.inflightKeys(), start, stop).StringSlice()
		if err != nil {
			return nil, b.err(ctx, err)
		}
		out := make([]driver.Listed, 0, len(res))
		for _, env := range res {
			id, body, _ := strings.Cut(env, "\n")
			out = append(out, driver.Listed{Message: driver.Message{ID: id, Queue: queue, Body: []byte(body)}})
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis broker: List: unknown state %q (want %q, %q, %q or %q)", state,
		driver.ListPending, driver.ListScheduled, driver.ListInFlight, driver.ListCompleted)
}

// Find returns the message of queue whose task ID is id, with its list, in
// one script (findScript): a queued message through the task-ID index
// K:ids (in flight, scheduled or pending, a few lookups whatever the
// queue's length), else among the completed (K:done, at most CompletedMax
// entries). Two limits: a message queued by a version before the index
// (or pushed by another program) is found only once completed; and of
// two queued messages with one task ID the index names the newer, so the
// older is not found while the newer is acked before it.
func (b *Broker) Find(ctx context.Context, queue, id string) (driver.Listed, driver.ListState, bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	k := b.keys(queue)
	res, err := findScript.Run(ctx, b.scripts, k.findKeys(), id).StringSlice()
	if err != nil {
		if errors.Is(err, goredis.Nil) {
			return driver.Listed{}, "", false, nil
		}
		return driver.Listed{}, "", false, b.err(ctx, err)
	}
	if len(res) != 3 {
		return driver.Listed{}, "", false, nil
	}
	tid, body, _ := strings.Cut(res[1], "\n")
	l := driver.Listed{Message: driver.Message{ID: tid, Queue: queue, Body: []byte(body)}}
	state := driver.ListState(res[0])
	if res[2] != "" {
		at, _ := strconv.ParseFloat(res[2], 64)
		l.At = time.UnixMilli(int64(at))
		if state == driver.ListScheduled {
			l.NotBefore = l.At
		}
	}
	return l, state, true, nil
}

package redisbroker

import (
	"context"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
)

// The schedule store (driver.ScheduleStore) of errand's periodic
// scheduler. Two keys under the hash tag {prefix} (P = {prefix}), so each
// script runs on one slot of a cluster:
//
//	P:schedules  hash  schedule ID -> definition (errand's encoding)
//	P:ticks      hash  schedule ID -> latest claimed tick (Unix ms)
//
// A schedule's state is its definition and one tick, never a key per tick.
// Neither key has a TTL.

var _ driver.ScheduleStore = (*Broker)(nil)

// claimTickScript records the tick and returns 1 when the schedule exists
// and the tick is later than the one recorded; returns 0 and changes
// nothing otherwise. One script is one atomic step: of concurrent claims
// of one tick, the first to run wins and every other sees its tick.
var claimTickScript = newScript(`
-- claimTick
-- KEYS[1] -> P:schedules
-- KEYS[2] -> P:ticks
-- ARGV[1] -> schedule ID
-- ARGV[2] -> tick (Unix ms)
local schedules, ticks = KEYS[1], KEYS[2]
local id, tick = ARGV[1], ARGV[2]
if redis.call('HEXISTS', schedules, id) == 0 then return 0 end
local cur = redis.call('HGET', ticks, id)
if cur and tonumber(cur) >= tonumber(tick) then return 0 end
redis.call('HSET', ticks, id, tick)
return 1
`)

// deleteScheduleScript removes the definition and the claimed tick
// together.
var deleteScheduleScript = newScript(`
-- deleteSchedule
-- KEYS[1] -> P:schedules
-- KEYS[2] -> P:ticks
-- ARGV[1] -> schedule ID
local schedules, ticks = KEYS[1], KEYS[2]
local id = ARGV[1]
redis.call('HDEL', schedules, id)
redis.call('HDEL', ticks, id)
return 1
`)

// scheduleKeys are the keys of claimTickScript and deleteScheduleScript.
func (b *Broker) scheduleKeys() []string {
	return []string{b.global("schedules"), b.global("ticks")}
}

// PutSchedule stores data as schedule id's definition (HSET), keeping its
// claimed tick.
func (b *Broker) PutSchedule(ctx context.Context, id string, data []byte) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (int64, error) { return b.rdb.HSet(ctx, b.global("schedules"), id, data).Result() })
	return b.err(ctx, err)
}

// DeleteSchedule removes schedule id and its claimed tick in one script.
func (b *Broker) DeleteSchedule(ctx context.Context, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return deleteScheduleScript.Run(ctx, b.scripts, b.scheduleKeys(), id).Result()
	})
	return b.err(ctx, err)
}

// Schedules returns every definition (HGETALL).
func (b *Broker) Schedules(ctx context.Context) (map[string][]byte, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	m, err := honourCancel(ctx, func() (map[string]string, error) { return b.rdb.HGetAll(ctx, b.global("schedules")).Result() })
	if err != nil {
		return nil, b.err(ctx, err)
	}
	out := make(map[string][]byte, len(m))
	for id, d := range m {
		out[id] = []byte(d)
	}
	return out, nil
}

// ClaimTick records tick (in ms) as schedule id's latest claimed tick when
// id exists and tick is later, in one script (a compare-and-set).
func (b *Broker) ClaimTick(ctx context.Context, id string, tick time.Time) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	n, err := honourCancel(ctx, func() (int, error) {
		return claimTickScript.Run(ctx, b.scripts, b.scheduleKeys(), id, tick.UnixMilli()).Int()
	})
	if err != nil {
		return false, b.err(ctx, err)
	}
	return n == 1, nil
}

// LastTick returns schedule id's latest claimed tick (zero: none).
func (b *Broker) LastTick(ctx context.Context, id string) (time.Time, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	s, err := honourCancel(ctx, func() (string, error) { return b.rdb.HGet(ctx, b.global("ticks"), id).Result() })
	switch {
	case err == goredis.Nil:
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, b.err(ctx, err)
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, b.err(ctx, err)
	}
	return time.UnixMilli(ms), nil
}

package redisbroker

import (
	"context"
	"time"

	"github.com/errand-go/errand/driver"
)

var _ driver.Uniquer = (*Broker)(nil)

// Uniqueness locks (driver.Uniquer): one string key per unique key, under
// the hash tag {prefix} like every key of no single queue (scripts.go):
//
//	P:unique:KEY  string  the holder's task ID, with the lock's ttl as the
//	                      key's own expiry (SET PX), so a lock whose worker
//	                      died goes by Redis's clock
//
// Taking and freeing are each one script: take when free or already ours
// (SET ... PX, as SET NX PX would, but also renewing our own), and
// compare-and-delete.

// lockScript takes the lock for a task when it is free or the task's
// own. Returns the holder's ID.
var lockScript = newScript(`
-- lock
-- KEYS[1] -> P:unique:KEY
-- ARGV[1] -> task ID
-- ARGV[2] -> ttl (ms)
local lock = KEYS[1]
local id, ttl = ARGV[1], ARGV[2]
local h = redis.call('GET', lock)
if h and h ~= id then return h end
redis.call('SET', lock, id, 'PX', ttl)
return id
`)

// unlockScript deletes the lock only if the task holds it.
var unlockScript = newScript(`
-- unlock
-- KEYS[1] -> P:unique:KEY
-- ARGV[1] -> task ID
local lock = KEYS[1]
local id = ARGV[1]
if redis.call('GET', lock) == id then redis.call('DEL', lock) end
return 1
`)

// lockKeys are the keys of lockScript and unlockScript for unique key key.
func (b *Broker) lockKeys(key string) []string { return []string{b.global("unique:" + key)} }

// Lock takes key for id for ttl (at least 1ms) unless another task holds
// it, and returns the holder.
func (b *Broker) Lock(ctx context.Context, key, id string, ttl time.Duration) (string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ms := max(ttl.Milliseconds(), 1)
	holder, err := honourCancel(ctx, func() (string, error) {
		return lockScript.Run(ctx, b.scripts, b.lockKeys(key), id, ms).Text()
	})
	return holder, b.err(ctx, err)
}

// Unlock frees key if id holds it.
func (b *Broker) Unlock(ctx context.Context, key, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return unlockScript.Run(ctx, b.scripts, b.lockKeys(key), id).Result()
	})
	return b.err(ctx, err)
}

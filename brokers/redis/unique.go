package redisbroker

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

// lock: KEYS lock key; ARGV id, ttl ms. Returns the holder's ID.
var lockScript = goredis.NewScript(`
local h = redis.call('GET', KEYS[1])
if h and h ~= ARGV[1] then return h end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`)

// unlock: KEYS lock key; ARGV id. Deletes the key only if id holds it.
var unlockScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`)

func (b *Broker) lockKey(key string) string { return b.global("unique:" + key) }

// Lock takes key for id for ttl (at least 1ms) unless another task holds
// it, and returns the holder.
func (b *Broker) Lock(ctx context.Context, key, id string, ttl time.Duration) (string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ms := max(ttl.Milliseconds(), 1)
	holder, err := honourCancel(ctx, func() (string, error) {
		return lockScript.Run(ctx, b.rdb, []string{b.lockKey(key)}, id, ms).Text()
	})
	return holder, b.err(ctx, err)
}

// Unlock frees key if id holds it.
func (b *Broker) Unlock(ctx context.Context, key, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return unlockScript.Run(ctx, b.rdb, []string{b.lockKey(key)}, id).Result()
	})
	return b.err(ctx, err)
}

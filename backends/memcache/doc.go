// Package memcachebackend is errand's memcached result backend, on
// github.com/bradfitz/gomemcache.
//
// # URL form
//
//	memcache://host:port[,host:port...][?prefix=errand&result_expiry=1h&group_expiry=24h]
//
// Several servers are spread by gomemcache's consistent key selection. Import
// the package for its side effect to register the scheme; New takes an
// injected *memcache.Client instead.
//
// # Guarantees
//
//   - States: one JSON item per task, expiring ResultExpiry after its last
//     write. memcached counts expiry in whole seconds, so an expiry is rounded
//     up to the next second and one second is added: a result never expires
//     early, and may live up to two seconds longer than asked.
//   - Group completion: an add of a per-member marker (only the first add of
//     a member succeeds, so a redelivered member counts once) followed by an
//     incr of the group's counter, so the count is O(1).
//   - Chord claim: an add of the claim item — exactly one claimer's add
//     succeeds — storing the claimer, so the same claimer reading it back wins
//     again after a crash.
//   - Group metadata is touched on every completion and lives GroupExpiry
//     after the last one (default 24h, never less than ResultExpiry).
//
// # Lossy storage: what it means for you
//
// memcached is a cache. Under memory pressure it evicts items, and a restart
// loses everything. Results can vanish before their expiry (AsyncResult.Get
// then returns core.ErrTaskNotFound rather than waiting), and so can group
// counters: a chord whose group metadata vanished never fires, and the worker
// that finds it gone marks the callback FAILURE with an error saying so. A
// worker process dying between a member's marker add and its counter incr
// (two calls, microseconds apart) also leaves the chord unfired. Size the
// cache so it does not evict, or use the Redis or MongoDB backend for chords
// you cannot afford to lose.
//
// # Limits
//
// An item holds at most Options.MaxItemSize bytes (default 1 MiB, memcached's
// default -I): a larger state fails with a clear error, never a silent drop.
// A group's member list is one item, so a group of about 25 000 members or
// more does not fit at the default size. gomemcache has no context support:
// each call is bounded by the client's Timeout (default 500ms) instead of ctx.
package memcachebackend

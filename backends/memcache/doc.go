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
//   - States: one JSON item per task (its Progress a JSON string of the
//     bytes the task gave, returned byte for byte), expiring ResultExpiry
//     after its last write. memcached counts expiry in whole seconds, so an expiry is rounded
//     up to the next second and one second is added: a result never expires
//     early, and may live up to two seconds longer than asked.
//   - Group completion: InitGroup writes the group size in its own item and
//     one item per member holding "0". A completion gets the size,
//     increments the member's item, and only the increment that returns 1
//     (the member's first completion, even racing a redelivery) increments
//     the group's counter; a redelivery reads the counter instead. So a member
//     counts once, and a UUID with no member item never counts. A completion
//     that counts makes the same eight calls whatever the group's size and
//     never reads the member list, which GroupStates reads once, when the
//     chord fires. Only a completion that finds no member item reads it, to
//     tell a UUID that is not a member (ErrNotMember: a stray, nothing
//     counted) from a member whose item is gone (ErrGroupNotFound).
//   - Chord claim: an add of the claim item — exactly one claimer's add
//     succeeds — storing the claimer, so the same claimer reading it back wins
//     again after a crash.
//   - Group metadata is touched on every completion and lives GroupExpiry
//     after the last one (default 24h, never less than ResultExpiry). The
//     exception is a member's own item, touched only by that member's
//     completion: every member must first complete within GroupExpiry of the
//     group's creation, or its completion finds its item gone and the chord
//     fails with ErrGroupNotFound.
//
// # Cancel
//
// The backend is not a driver.Canceller, so errand cancels through its
// portable path (GetState, then SetStates of CANCELLED), where a
// worker's write landing just after the cancel may replace it (the
// worker still learns of the cancel at its next lease extension). A
// cancel that no later write replaces needs every state write to check
// the task's current item first: memcached has no conditional write on
// an item's value, only gets and a compare-and-swap with the token a
// read returned, so SetStates would pay a round trip more per state on
// the path of every task. The backend does not make that trade.
//
// # Lossy storage: what it means for you
//
// memcached is a cache. Under memory pressure it evicts items, and a restart
// loses everything. Results can vanish before their expiry (AsyncResult.Get
// then returns errand.ErrTaskNotFound rather than waiting), and so can group
// counters: a chord whose group metadata vanished never fires, and the worker
// that finds it gone marks the callback FAILURE with an error saying so. An
// evicted member item does the same when that member completes: the member is
// refused, never counted twice.
//
// A completion is two increments, not one atomic step. A worker process dying
// between the increment of the member's item and that of the group's counter
// (two calls, microseconds apart) leaves the member uncounted: its redelivery
// finds the member's item already incremented and does not count it again, so
// the chord never fires and its callback stays PENDING. If the counter
// increment returns an error, the member's item is reset so that a
// redelivery counts the member; should the failed increment have been applied
// after all, the member counts twice and the chord fires one completion
// early, failing on a member that has not finished.
//
// Size the cache so it does not evict, or use the Redis or MongoDB backend
// for chords you cannot afford to lose.
//
// # Limits
//
// An item holds at most Options.MaxItemSize bytes (default 1 MiB, memcached's
// default -I): a larger state fails with a clear error, never a silent drop.
// A group's member list is one item, so a group of about 25 000 members or
// more does not fit at the default size. InitGroup writes one item per member
// (up to eight at a time), so sending a group costs one call per member.
//
// # Timeouts
//
// gomemcache has no context support: each round trip is bounded by the
// client's socket Timeout (memcache.DefaultTimeout, 500ms, unless set on the
// client passed to New) instead of ctx; it is this backend's per-call
// timeout. Keep it below the ctx deadlines you give calls. Open pings the
// server, bounded the same way.
package memcachebackend

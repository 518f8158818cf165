// Package mongobackend is errand's MongoDB result backend, on
// go.mongodb.org/mongo-driver/v2.
//
// # URL form
//
//	mongodb://[user:password@]host:port[,host:port...]/[database][?options][&prefix=errand&result_expiry=1h&group_expiry=24h&timeout=10s]
//	mongodb+srv://...
//	mongodb://.../[database]?format=machinery[&result_expiry=1h]
//	    machinery v2's tasks and group_metas collections (NewMachinery;
//	    database "machinery" by default; docs/migrating-from-machinery.md)
//
// The database defaults to "errand"; driver options (authSource,
// replicaSet, maxPoolSize, ...) pass through. Import the package
// (github.com/errand-go/errand/backends/mongo) for its side effect to register
// both schemes with errand.OpenBackend; New takes ctx and an injected
// *mongo.Client, and returns an error (it creates the indexes).
// Passwords never appear in errors or logs.
//
// # Timeouts
//
// Open connects and pings within the caller's ctx and the per-call timeout,
// and disconnects within 500ms more after a failed ping. Options.CallTimeout
// (URL timeout=, default 10s; also the URL-opened client's timeoutMS unless
// the URL sets one) bounds each call, the driver's retries included, so a
// call without a ctx deadline returns when the server accepts but never
// answers.
//
// # Storage
//
// Collections PREFIX_tasks (one document per task, _id = task UUID) and
// PREFIX_groups (one document per group: members in group order, the set of
// completed members, a completion counter, the group size and the chord
// claimer). Every document carries expires_at: every read filters on it, so
// expiry is exact even where the server has no TTL indexes, and a TTL index on
// it (created when the server supports one) deletes expired documents.
//
// # Workflow primitives: one atomic server-side operation each
//
//   - CompleteGroupMember is one update filtered on "a member, and not yet
//     in done" (members: ID, done: {$ne: ID}): $addToSet the member and $inc
//     the counter together, then a read of the counter and size alone (O(1);
//     FerretDB v1 has no projection on findAndModify). A redelivered member
//     does not match and reads the counter unchanged. A UUID that is not a
//     member never matches, so it never counts: the read finds nothing and
//     a second read tells a missing group (ErrGroupNotFound) from a stray
//     ([driver.ErrNotMember]). Two last members racing may both read
//     done == total; the chord claim lets only one of them fire the callback.
//   - ClaimChord is one update filtered on "no claimer yet, or this claimer",
//     judged by its matched count: exactly one claimer matches first; the same
//     claimer matches again after a crash. (machinery's Mongo backend waited
//     for an ErrNoDocuments that UpdateOne never returns, so its chords fired
//     on every completion.)
//   - GroupStates reads the group, then all member states in one query.
//
// # Cancel and progress
//
// Both formats are a [driver.Canceller]: Cancel is, per task, one
// findAndModify filtered on "live and not finished", which writes
// CANCELLED keeping the task's name, attempt, CreatedAt, StartedAt and
// progress (a read, and one more try, only when the task's times are
// after the canceller's clock). SetStates keeps the cancel: its upsert's
// filter leaves a live CANCELLED out unless the state written is PENDING,
// so the refusal costs nothing on the ordinary path (a refused write
// meets the document's _id, and one read tells the cancel from a racing
// insert), answered per state as an error wrapping [driver.ErrCancelled].
// In machinery's format a cancel is stored as machinery knows final
// states, a FAILURE with the Error "errand: task cancelled", marked with
// errand's error_kind "cancelled" (as the Redis backend marks it), and
// read back as CANCELLED. A state's Progress is stored as a string, returned byte
// for byte.
//
// On MongoDB each of these is one atomic update of one document. FerretDB
// v1 does not make single-document updates atomic across connections:
// there a cancel racing a write of another connection may be overwritten
// (the tests use maxPoolSize=1, one connection, where it holds).
//
// The backend uses no transactions, change streams, $elemMatch, positional
// operators or nested arrays, so it runs on MongoDB and on FerretDB.
//
// # Test server
//
// errand's tests run against FerretDB v1 (SQLite handler). FerretDB v1 does
// not make single-document updates atomic across connections, so the test
// harness sets maxPoolSize=1; real MongoDB needs no such setting.
package mongobackend

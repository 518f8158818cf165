// Package redisbackend is errand's Redis result backend, on go-redis's
// UniversalClient: a single node, Sentinel, or Redis Cluster.
//
// # URL form
//
//	redis://[user:password@]host:port[/db][?prefix=errand&result_expiry=1h&group_expiry=24h&timeout=10s]
//	                                              timeout: Options.CallTimeout, per call
//	rediss://...[&tls_ca=/path/ca.pem]            the same over TLS; tls_ca: trust
//	                                              only the CAs in that PEM file
//	redis://host:port?addr=host2:port&addr=...    Redis Cluster
//	redis://...?format=machinery[&result_expiry=1h] machinery v2's result keys
//	                                              (NewMachinery;
//	                                              docs/migrating-from-machinery.md);
//	                                              result_expiry=never: states and
//	                                              groups never expire (machinery's
//	                                              results_expire_in < 0)
//	redis-sentinel://[user:password@]sentinel1:port,sentinel2:port[/db]?master=NAME
//	                                              Redis Sentinel (rediss-sentinel://
//	                                              over TLS); docs/redis.md, Sentinel
//
// Import the package (github.com/errand-go/errand/backends/redis) for its
// side effect to register these schemes with errand.OpenBackend (the broker,
// package redisbroker, registers its own; neither module requires the other).
// New takes an injected client instead.
//
// # Storage
//
// A task's state is one JSON string, written in one round trip per state
// change — SET ... PX for a PENDING, a small script for any other state,
// which does not write over a cancel (below) — and expiring ResultExpiry
// after its last write (default 1h). A group is three keys sharing the hash tag {prefix:group:ID}
// — its metadata hash (size, chord claimer, and one field per member for the
// membership check), its member list (group order) and the set of completed
// members — so every group script runs on Redis Cluster.
//
// # Workflow primitives
//
//   - CompleteGroupMember is one Lua script: check the UUID is a member
//     (HEXISTS on its field in the metadata hash; a UUID that is not a member
//     changes nothing and gets [driver.ErrNotMember]), SADD it to the done
//     set (a redelivered member is already there) and return SCARD with the
//     size: idempotent, member-only and O(1).
//   - ClaimChord is one Lua script: set the claimer if none is set, and
//     report whether the claimer now stored is the caller (so the same
//     claimer wins again after a crash).
//   - GroupStates reads the member list, then every member's state in one
//     pipeline.
//   - Start ([driver.Starter]) is one Lua script per task: read the state,
//     check the starter's table and SET ... PX the STARTED state (a key
//     holds only the current state, so RECEIVED, overwritten in the same
//     script, is not stored), keeping the previous created_at. A batch is
//     one pipeline of scripts, each on its own task key (its own slot on a
//     cluster).
//   - SetPendingIfAbsent ([driver.PendingWriter]) is SET ... NX PX per
//     task, in one pipeline.
//   - Cancel ([driver.Canceller]) is one Lua script per task: read the
//     state and, unless there is none or it is terminal, SET ... PX the
//     CANCELLED state keeping the task's name, attempt and created_at. A
//     cancel is kept: SetStates writes a state other than PENDING with a
//     script that leaves a CANCELLED task as it is and answers
//     [driver.ErrCancelled] for that state, and Start refuses it (a
//     terminal state). In machinery's format ([MachineryBackend]) a cancel
//     is machinery's FAILURE marked as errand's (its Error the canceller's,
//     ErrorKind "cancelled"), read back as CANCELLED.
//
// The backend declares where it keeps its states ([Backend.Location],
// [driver.Located]): its client, key prefix and result expiry, in a type
// of errand's internal module that only errand's Redis broker understands.
// That broker, on the same single Redis node, co-locates with it
// ([driver.Colocator]): a send's PENDING, an attempt's STARTED and a quiet
// success's SUCCESS then go in the round trip of the publish, the fetch
// and the ack, in the layout above. The backend exports nothing else for
// the broker.
//
// Group keys expire GroupExpiry (default 24h, never less than ResultExpiry)
// after the group's last completion, so a live group never loses its
// metadata to a result's expiry (machinery#352).
//
// # Retries
//
// go-redis retries a command after a network error or a read timeout
// (MaxRetries, default 3), which for a script would run it again when
// only its reply was late. The backend runs its scripts (start, group
// init, member completion, chord claim) with go-redis's per-command
// NoRetry flag (redisconn.NoRetry), on clients Open makes and on clients
// handed to New alike; a failed script returns its error to errand,
// which retries at its own level where the step is idempotent. So do the
// cancel and the write of a state other than PENDING. Its plain commands
// (SET ... PX of a PENDING, GET) keep the client's retries: a second run
// writes the same value. docs/redis.md, "Retries".
//
// Result waiters poll with backoff (errand's default); the backend does not
// implement [driver.StateWaiter]. States errand writes together (the
// PENDING states of a group or chord, a task's RECEIVED and STARTED, the
// SUCCESS states of concurrent tasks) share one pipeline (SetStates), each
// state answered on its own.
//
// # Logging
//
// go-redis has one logger for the whole process, which prints connection
// errors to stderr. The first New or Open of an errand Redis broker or
// backend replaces it (once, with redis.SetLogger) by a forwarder that
// discards go-redis's lines unless an [Options.Logger] was given: they go,
// at Warn with the attribute component=go-redis, to the most recent non-nil
// Options.Logger of any Redis broker or backend in the process. A program
// that wants go-redis's own logger back calls redis.SetLogger after making
// its first broker or backend.
package redisbackend

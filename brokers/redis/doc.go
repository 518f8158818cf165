// Package redisbroker is errand's Redis broker, on go-redis's UniversalClient:
// a single node, Sentinel, or Redis Cluster.
//
// # URL form
//
//	redis://[user:password@]host:port[/db][?prefix=errand&max_payload=BYTES&timeout=10s]
//	                                    max_payload: default 1 MiB, -1 no limit;
//	                                    timeout: Options.CallTimeout, per call
//	rediss://...[&tls_ca=/path/ca.pem]  the same over TLS; tls_ca: trust only
//	                                    the CAs in that PEM file
//	redis://[user:password@]host:port?addr=host2:port&addr=host3:port
//	                                    Redis Cluster (several seed addresses)
//	redis://...?format=machinery[&default_queue=Q&delayed_tasks_key=K&max_block=250ms]
//	                                    machinery v2's queues (NewMachinery;
//	                                    docs/migrating-from-machinery.md)
//	redis-sentinel://[user:password@]sentinel1:port,sentinel2:port[/db]?master=NAME
//	                                    Redis Sentinel (rediss-sentinel:// over
//	                                    TLS); see redisconn.SentinelSchemes
//	                                    and docs/redis.md, Sentinel
//
// Import the package (github.com/errand-go/errand/brokers/redis) for its side
// effect to register these schemes with errand.OpenBroker. Passwords never
// appear in errors or logs. New takes an injected client instead. The URL
// form is shared with the Redis result backend (package redisbackend); neither
// module requires the other.
//
// # Design: lists, a lease set and Lua
//
// A queue is a list of due message IDs, a sorted set of delayed IDs by due
// time, a sorted set of in-flight IDs by lease deadline and a hash of message
// bodies. Fetch is one Lua script: it promotes due delayed messages (earliest
// first, in batches), puts back messages whose lease ran out, then pops up to
// limit IDs and leases them — so a message is never removed when it is fetched,
// only when it is acked. Each delivery carries a lease token; ack, release,
// extend and reject check it, so a consumer whose lease ran out cannot settle
// a message another consumer now holds ([driver.ErrLeaseLost]). The ack
// script takes many deliveries of one queue (up to
// Limits().MaxAckBatch [MaxAckBatch]): errand's portable layer joins the
// acks of concurrent tasks into one script run, checking each delivery's
// token on its own.
//
// Redis Streams with consumer groups were the alternative. They give blocking
// reads and pending-entry lists, but idle-time based reclaiming (XAUTOCLAIM)
// has one idle threshold per call rather than a lease per delivery, and
// delayed tasks would still need a sorted set beside the stream. The list +
// lease-set design keeps one mechanism for delays, leases and redelivery, each
// step one atomic script.
//
// Every key of a queue carries the hash tag {prefix:queue} and every script
// receives its keys in KEYS, so it runs unchanged on Redis Cluster. No key
// has a TTL: recovery depends on nothing that expiry can drop (eviction must
// be off, as for any queue: maxmemory-policy noeviction).
//
// # Delivery semantics
//
// At-least-once. A consumer that dies loses nothing: its messages come back
// when their leases run out (errand's worker extends leases while tasks run).
// An idle Fetch blocks on a per-queue wake-up list; a publish wakes it at once,
// and it wakes by itself at the earliest due time or lease deadline (and at
// least every Options.MaxBlock, to notice a cancelled ctx or Close). The
// fetch script is pipelined behind the wait, so a woken Fetch has its
// messages in the wake-up's round trip; a Fetch cancelled while it waits
// returns what that script leased, if anything.
//
// Delays: never early — due times are compared with the server's clock and
// rounded up to the millisecond; late by the wake-up latency (about a
// round trip). There is no maximum delay. Due messages are delivered
// highest Message.Priority first, and within one priority in the order
// they became due; priority 0 keeps the one list and the one round trip
// it always had (docs/redis.md, Priority).
//
// # Limits
//
// Payload: Options.MaxPayload, max_payload in the URL; default
// [DefaultMaxPayload], 1 MiB. errand refuses a larger message before
// anything is written, state or message, with an error satisfying
// errors.Is(err, errand.ErrPayloadTooLarge); Publish refuses it too. A
// negative value lifts the bound (Redis strings hold up to 512 MB). The
// default is a guard, not a Redis limit: every queued byte lives in Redis's
// memory until acked, and a worker decodes what it fetches, so large data
// belongs in a store the task reads, with its key as the argument.
// (errand's SQS broker takes 256 KiB, Kafka 1 MB by default; asynq and
// Celery set no bound of their own.)
//
// The bound holds on the consumer's side too: a message over MaxPayload
// that reached the queue anyway (text pushed onto the list by another
// program, a message published through a broker with a larger bound) is
// set aside by the fetch script itself: it goes to the queue's archive
// with the reason "message body of N bytes is over the broker's
// MaxPayload of M bytes: set aside by fetch, never delivered", its size
// and its first [ArchivePreview] bytes (never a copy of the whole body,
// which would hold the server for every client as long as the copy
// takes), and the script leases the next message instead. No fetch reply
// carries a body over the bound, whatever the client's read timeout.
// Archived lists a bounded entry: one over ArchivePreview (plus room for
// its metadata) by its task ID and length alone; ArchivedEntry reads an
// entry whole.
//
// Rejected and archived messages stay in the queue's archive (see
// Operating) within its retention.
//
// # Retries
//
// go-redis retries a command after a network error or a read timeout
// (go-redis's MaxRetries, default 3): for a script, that runs it again when
// only its reply was late or lost — a second fetch leasing more messages
// while the first lease is orphaned, a publish storing its messages
// twice, a unique lock or rate-limit token taken twice. The broker runs
// every one of its scripts, alone or in a pipeline, with go-redis's
// per-command NoRetry flag (redisconn.NoRetry), which every go-redis
// client honours: on clients Open makes and on clients handed to New
// alike, whatever their MaxRetries, nothing about the client changes and
// no second pool is opened. A command that never reached the wire is
// still replayed, and a cluster's MOVED or ASK still followed. A script
// whose reply is lost returns its error, and errand's worker goes on as
// after any failed fetch or settle (at-least-once: a lease whose ack was
// lost runs out and the message comes back). Plain commands whose second
// run changes nothing (SADD of the queue set, HSET of a schedule, reads)
// keep the client's retries; a publish's MULTI ... EXEC transaction (on
// a single node, for messages due now at priority 0) carries the flag on
// its first command (redisconn.Once), so it is not sent twice either.
// docs/redis.md, "Retries", has the reasons.
//
// # Operating
//
// The broker implements every operator capability: [driver.Archiver],
// [driver.Lister], [driver.Finder], [driver.QueueLister],
// [driver.QueueKnower], [driver.Pauser] and [driver.Heartbeater]. Besides the keys of a queue above, it keeps (all in
// scripts.go's key table):
//
//   - an archive per queue: K:archive (a sorted set by archive time) and
//     K:archived (task ID -> entry). Archive settles the delivery like Ack
//     (driver.ErrLeaseLost likewise), stores the entry and trims the
//     archive to the retention it is given, in one script. Reject archives
//     too, with the broker's retention: Options.ArchiveMaxCount (default
//     [DefaultArchiveMaxCount], 10000) and Options.ArchiveMaxAge (default
//     [DefaultArchiveMaxAge], 90 days). Stats.Dead counts the archive and
//     Archived lists it. Requeue removes the entry and enqueues the
//     message in one script, or does nothing (driver.ErrNotArchived).
//     Dead letters kept by an older version (K:dead) move into the archive
//     on every read of a queue's archive or stats (older workers may still
//     write them during a rolling upgrade).
//   - the recently completed messages of each queue: the ack script pushes
//     the acked message (ID, body, ack time) onto K:done, trimmed to
//     Options.CompletedMax (default [DefaultCompletedMax], 1000), and
//     counts the ack in K:acked (Stats.Completed): an ack is still one
//     round trip. Kept bodies cost Redis memory like queued ones.
//   - {prefix}:queues, the set of queues published to or fetched from,
//     added to in the round trip of every publish and fetch, so it heals
//     within one publish or fetch of any process after the server lost
//     it (a FLUSHDB, a restart without persistence, a failover); Queues
//     takes out of it the queues of which nothing remains (nothing
//     queued, archived or completed within Options.CompletedMaxAge), see
//     [Broker.Queues], and [Broker.KnowsQueue] still knows them;
//   - K:ids, each queue's index from task ID to message ID, kept by the
//     scripts that queue and settle messages, through which
//     [Broker.Find] looks a queued task up in a fixed number of commands
//     (a completed one among the at most CompletedMax completed);
//   - {prefix}:paused, the set of paused queues: the flag outlives
//     processes until Resume; Fetch ignores it, errand's workers poll it;
//   - {prefix}:workers and {prefix}:beats, each live worker's heartbeat
//     data and its expiry by the server's clock; Beats drops the expired
//     first, so a crashed worker is gone one ttl after its last beat;
//   - {prefix}:concurrency:KEY, the slots held of each concurrency limit
//     ([Broker.Acquire]), each holder with when its slot lapses by the
//     server's clock: a killed worker's slots come back one ttl after
//     their last renewal.
//
// The keys of no single queue share the hash tag {prefix}, so each script
// on them runs on one slot of a cluster: an Acquire of a task's and its
// queue's limits takes both or neither on a cluster as on one node. docs/redis.md has the details.
//
// # With errand's Redis backend
//
// The broker is a [driver.Colocator]: when errand's Redis result backend
// declares (its Location) that it keeps its states on the broker's own
// single Redis server (the same client, or clients of equal address, DB
// and user; not a cluster, where a task's state key and a queue's keys
// are in different slots), errand sends each SendTask's PENDING state and
// message in one pipeline, a worker's fetch script begins the attempts of
// the tasks it leases (no Start call before the task's function runs),
// and the ack script of a task that nothing follows records its SUCCESS
// (over a CANCELLED state it writes nothing, acks the delivery and
// answers driver.ErrCancelled; a fetch never starts a cancelled task):
// one round trip each. See [Broker.Colocate] and docs/redis.md, "one
// round trip in, one out".
//
// # Cancel notices
//
// The broker is a [driver.CancelNotifier]: [Broker.NotifyCancel] PUBLISHes
// the cancelled tasks' UUIDs on the channel PREFIX:cancel, and
// [Broker.ListenCancel] SUBSCRIBEs to it (go-redis's PubSub, which
// reconnects on its own), so a worker of any broker of that prefix on the
// server (a single node, a cluster, through Sentinel) cancels a running
// task at once rather than at its next lease extension. Notices are not
// stored: one sent while a listener is away is lost, and the worker
// finds the cancel in the backend at the next extension.
//
// A Redis ACL user needs the channel and its two commands:
// &PREFIX:cancel +subscribe +publish (docs/redis.md, "The narrowest ACL
// user"). Refused them (NOPERM), only the notices are lost: ListenCancel
// and NotifyCancel return the error, the worker logs once that it hears
// no notices, Server.Cancel still records and reports the cancel, and
// running tasks are cancelled at their next lease extension.
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
package redisbroker

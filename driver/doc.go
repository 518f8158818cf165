// Package driver holds the contracts errand's brokers and result backends
// implement, and the few helpers they share. Applications never import it:
// they use the root package errand, which wraps every driver in a portable
// layer that owns what drivers would otherwise each repeat (closed and ctx
// checks, payload limits, joining concurrent acks, starts and state writes
// into batch calls, redaction of secrets in errors).
//
// # Brokers
//
// A [Broker] is a handful of pull-based primitives on one service: Publish,
// Fetch under a lease, Ack, Release (optionally not before a time), Extend
// and Reject. The worker loop, retries and workflows are errand's.
// Capabilities a service may lack are small optional interfaces, never methods
// that fail; errand discovers each once, when it wraps the driver:
//
//   - [Limiter]: the largest payload, delay and ack batch the broker takes;
//   - [StatsReporter]: counts of a queue (pending, delayed, in flight, dead);
//   - [Purger]: drops every pending and delayed message of a queue;
//   - [QueueLister]: names every queue published to;
//   - [QueueKnower]: tells whether one queue was ever used, listed now or not;
//   - [Lister]: lists a queue by state, a page at a time;
//   - [Finder]: finds one message of a queue by its ID;
//   - [Archiver]: keeps what failed for good, and requeues or deletes it;
//   - [Pauser]: pauses a queue for every consumer;
//   - [Heartbeater]: keeps the heartbeats of live workers;
//   - [Uniquer]: holds the locks of unique tasks on the broker's server;
//   - [RateLimiter]: keeps per-task rate limits on the broker's server;
//   - [ConcurrencyLimiter]: keeps fleet-wide concurrency limits, slots
//     under leases, on the broker's server;
//   - [ScheduleStore]: keeps periodic schedules and claims their ticks;
//   - [Colocator]: sends, starts and settles in one step with a backend
//     on its own server (see "Co-location" below);
//   - [Transactor]: publishes inside a caller's own transaction (see
//     "Transactions" below).
//
// # Backends
//
// A [Backend] stores [TaskState]s and the workflow counters groups and
// chords need. Its workflow primitives must be atomic on the server side.
// Optional, each discovered once like a broker's:
//
//   - [StateWaiter]: wakes a waiter when a task's state changes;
//   - [Expirer]: reports how long results are kept;
//   - [Starter]: reads a task's state and begins its attempt in one step;
//   - [PendingWriter]: writes PENDING only where a task has no state;
//   - [Located]: declares where it keeps its data, for a [Colocator];
//   - [Transactor]: writes states and group metadata inside a caller's
//     own transaction (see "Transactions" below).
//
// # Co-location
//
// When a broker and a backend keep their data on one server (a Redis
// node, a SQL database, the memory drivers' process), errand can send,
// start and settle a task in one trip instead of two. That is one optional
// capability: the backend declares its location ([Located]), a broker that
// understands it returns its one-trip calls ([Colocator.Colocate], a
// [Colocation]), and errand falls back to the portable calls whenever
// Colocate answers nil. The location is a value of a type of the driver
// family's own (an internal package both drivers import), so a broker
// never recognises a partner by its shape, and a backend exports nothing
// for a broker. errand's memory drivers and its Redis drivers implement
// it; the conformance kit checks it, with broken variants, on every run.
//
// # Transactions
//
// An application can send a task inside its own transaction on the server
// a driver uses, so that the task exists if and only if the transaction
// commits: it puts the transaction in the send's ctx ([WithTx]), and a
// driver that can write inside it ([Transactor.CheckTx] answers nil) does
// the send's writes inside it, found with [TxFrom]. errand refuses such a
// send when the broker cannot (nothing is written); a backend that cannot
// has its states written outside the transaction, as without one.
//
// # Batch calls
//
// Settlement is batch-shaped: [Broker.Ack], [Backend.SetStates],
// [Starter.Start] and [PendingWriter.SetPendingIfAbsent] each take a batch
// and answer for each item on its own, by one convention. errand joins the
// acks, starts and single state writes of concurrent callers (worker
// slots, producers) into shared calls, and writes a group's PENDING states
// in chunks of errand's Config.PublishBatch; it calls SetPendingIfAbsent
// with one state, a SendTask's, each time, and a driver answers it by the
// same convention:
//
//   - the items are independent: each succeeds or fails on its own, and the
//     batch need not be atomic;
//   - a call answers nil when every item succeeded, or else exactly one
//     error per item, in order, nil where that item succeeded (a slice of
//     all nils is the same answer as nil);
//   - a call that fails as a whole (the connection broke, ctx ended)
//     answers the same error for every item: [BatchErrors](len(items), err);
//   - Start, whose answers carry data, always returns one [StartResult] per
//     request, with the error in its Err field ([StartFailed] for a call
//     that failed as a whole).
//
// errand checks every answer: one of another length is the driver's bug,
// and fails every item of the call with an error saying so. The
// conformance kit checks the convention on every driver.
//
// # Opening by URL
//
// A driver registers its schemes from init with [RegisterBroker] or
// [RegisterBackend]; errand.OpenBroker and errand.OpenBackend find them.
//
// # Proving a driver
//
// The package github.com/errand-go/errand/conformance runs every promise
// of these contracts against a driver on its real server.
package driver

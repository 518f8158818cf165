// Package driver holds the contracts errand's brokers and result backends
// implement, and the few helpers they share. Applications never import it:
// they use the root package errand, which wraps every driver in a portable
// layer that owns what drivers would otherwise each repeat (closed and ctx
// checks, payload limits, ack batching, redaction of secrets in errors).
//
// # Brokers
//
// A [Broker] is a handful of pull-based primitives on one service: Publish,
// Fetch under a lease, Ack, Release (optionally not before a time), Extend
// and Reject. The worker loop, retries and workflows are errand's.
// Abilities a service may lack are small optional interfaces, never methods
// that fail: [Limiter], [Inspector], [DeadLetterInspector], [Purger],
// [StatsReporter] and [BatchAcker]; flow control on the broker's server,
// [Uniquer] (unique tasks) and [RateLimiter] (per-task rate limits).
//
// # Backends
//
// A [Backend] stores [TaskState]s and the workflow counters groups and
// chords need. Its workflow primitives must be atomic on the server side.
// Optional: [StateWaiter], [StateBatcher], [Expirer].
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

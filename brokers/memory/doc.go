// Package memorybroker is errand's in-process broker: the embedded default, with
// no server and no dependencies. It keeps the same promises as the network
// brokers and passes the same conformance suite; it is not an "eager" mode
// that runs tasks on the caller's goroutine.
//
// # URL form
//
//	memory://            a new, private broker
//	memory://NAME        the broker named NAME in this process, created on
//	                     first use (so a producer and a worker opened by
//	                     URL share it)
//	memory://NAME?max_payload=BYTES
//
// Import the package for its side effect to register the scheme with
// errand.OpenBroker; New makes a private broker without a URL:
//
//	import _ "github.com/errand-go/errand/brokers/memory"
//
// # Delivery semantics
//
// At-least-once within the process: a fetched message is leased, not
// removed; if it is neither acked nor released before its lease runs out it
// is delivered again. Nothing survives the process.
//
// Delays are kept in a per-queue heap ordered by due time; a blocked Fetch
// sleeps until the earliest due time or lease expiry, or until a publish
// wakes it. A message is never delivered before its NotBefore; lateness is
// the Go timer's (well under a millisecond on an idle machine). Due
// messages are delivered by priority (higher first), then due time, then
// publish order.
//
// An ack, release or extend of a delivery whose lease ran out is accepted
// if no other consumer has taken the message since; otherwise it returns
// [driver.ErrLeaseLost]. The broker is a [driver.BatchAcker]: errand's
// batches of concurrent acks are taken under one lock.
//
// # Limits
//
// No maximum delay. The maximum payload is Options.MaxPayload (default: no
// limit). Memory grows with what is queued.
package memorybroker

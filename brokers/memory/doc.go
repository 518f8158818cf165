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
// [driver.ErrLeaseLost]. A batch of acks is taken under one lock; a
// delivery whose lease is lost fails alone.
//
// # Operating
//
// The broker has every operator's capability errand uses (Server.Queues,
// List, Archived, Requeue, Pause, Workers, ...):
//
//   - [driver.Archiver]: each queue keeps an archive of what failed for
//     good, newest first. Archive applies the retention it is given in the
//     same step (the oldest entries past MaxCount, those archived more
//     than MaxAge ago); Reject stores into the same archive, with the
//     reason as both Reason and Error, the delivery count as Attempts,
//     under [DefaultRetention] (10000 entries, 90 days). Stats' Dead
//     counts the archive. Requeue removes the entry and publishes under one lock.
//   - [driver.Lister]: pending in delivery order, scheduled by due time,
//     in flight by delivery time, and the last [MaxCompleted] (1000) acked
//     messages of each queue, newest first; Stats' Completed counts every
//     ack.
//   - [driver.QueueLister]: every queue a message was published to since
//     the broker was made.
//   - [driver.Pauser]: the paused flags live in the Broker value, shared
//     by every Server using it (a memory://NAME broker: every Server of
//     the process that opens the name).
//   - [driver.Heartbeater]: each worker's last heartbeat, until Unbeat or
//     its ttl runs out (checked as they are read).
//   - [driver.Finder]: one message by ID, in flight, pending, scheduled
//     or among the completed, under the broker's lock.
//   - [driver.Colocator]: with errand's memory result backend (which
//     declares its store of states as its location), errand sends,
//     starts and settles each task in one call of the broker: a send
//     writes PENDING where absent and publishes under the broker's lock, a
//     fetch begins the attempts of what it leases before it returns, a
//     settle writes the final states, then acks. See [Broker.Colocate].
//   - [driver.Transactor]: [Broker.Begin] starts a [Tx], the memory
//     drivers' stand-in for an application's database transaction: a send
//     whose ctx carries it (errand.WithTx) is kept in the Tx, its messages
//     and unique keys by the broker and its states by any memory backend,
//     and applied in one step of the broker at [Tx] Commit, or dropped at
//     Rollback. [Broker.CheckTx] accepts only the broker's own open Tx.
//   - [driver.CancelNotifier]: a cancel notice ([Broker.NotifyCancel])
//     reaches every listener of the broker value ([Broker.ListenCancel]:
//     every worker of the process using it), each on a goroutine of its
//     own fed by an unbounded queue, so a notice never blocks; [Broker.Close]
//     ends the listeners and waits for them.
//
// # Limits
//
// No maximum delay. The maximum payload is Options.MaxPayload (default: no
// limit). Memory grows with what is queued, archived (up to each
// retention) and heartbeating.
package memorybroker

// Package sqsbroker is errand's Amazon SQS broker (standard queues), on
// aws-sdk-go-v2.
//
// # URL form
//
//	sqs://?region=eu-west-1[&prefix=errand-&max_hop=15m&wait=1s&create=false&timeout=10s]
//	sqs://HOST:PORT?region=us-east-1&insecure=1     a local endpoint (fauxqs, LocalStack)
//	sqs://...?format=machinery                      machinery v2's queues and JSON
//	                                                (Options.Machinery)
//
// Import the package (github.com/errand-go/errand/brokers/sqs) for its side
// effect to register the scheme with errand.OpenBroker. Credentials come from
// the AWS default chain, never from the URL. New takes an injected
// *sqs.Client instead; build it with [RequestBodyWorkaround] (Open does).
//
// # Timeouts
//
// Open checks the endpoint with one ListQueues call within the caller's ctx
// ([Broker.Ping]). Options.CallTimeout (URL timeout=, default 10s) bounds
// every other SQS call, the SDK's retries included, so a call without a ctx
// deadline returns when the endpoint accepts but never answers; the
// long-poll receive is bounded by its wait plus 10s instead.
//
// # Queues
//
// One queue per routing key, named PREFIX+key (characters outside
// [A-Za-z0-9_-] become '-', long names keep a hash), created on first use
// unless Options.NoCreate; rejected messages go to PREFIX+key+"-dead", or,
// from a FIFO queue, to the FIFO queue PREFIX+key+"-dead.fifo" (earlier
// versions used NAME.fifo-dead, a name only emulators accept).
//
// Queue URLs are cached. When a call finds its queue gone — deleted by an
// operator, or an SQS endpoint that restarted empty — the broker drops the
// cached URL, creates the queue again as at its first use (a FIFO queue
// stays FIFO; NAME-dead or NAME-dead.fifo comes back at the next reject) and runs the call once
// more: sends go through and a worker's receive loop picks up where it was.
// Messages held by the deleted queue are gone with it; settling one of them
// returns [driver.ErrLeaseLost]. With Options.NoCreate nothing is created:
// every call on the queue fails with an error naming it and saying it no
// longer exists (a worker reports it on each fetch) until it is recreated.
// Real SQS refuses to create a queue within 60 seconds of deleting one of
// that name (QueueDeletedRecently): calls fail with that reason until then.
//
// # Delivery semantics
//
// At-least-once. The lease is the visibility timeout (whole seconds, at
// least one), extended with ChangeMessageVisibility while a task runs. A
// queue's Fetch calls share its receives: while Fetch calls wait, up to
// Options.Pollers ReceiveMessage calls (of up to 10 messages, as many as
// the waiting calls still want) run at once, and what a Fetch does not
// take is buffered for the next one. A buffered
// message is handed out only while at most a tenth of its lease has gone
// by (its visibility is renewed first otherwise), and given back when no
// Fetch takes it within that time. A receive long-polls for
// Options.WaitTime and is never cancelled mid-flight: when the caller's ctx
// ends, Fetch returns at once and what the poll still brings is buffered,
// then given back (Close gives back the buffer and late polls at once).
// Release and shutdown give a message back with
// ChangeMessageVisibility — at least one second, because aws-sdk-go-v2 drops
// a zero visibility timeout from the request. SQS cannot tell a stale
// receipt handle from a current one: a consumer whose lease ran out may still
// delete a message another consumer now holds (that consumer's task still
// runs).
//
// # Acks
//
// The broker declares Limits().MaxAckBatch 10, and errand's portable
// layer, not this package, joins acks into Ack calls: the acks of
// concurrent tasks on one queue share DeleteMessageBatch calls of up to 10
// entries, each ack getting its own entry's result. Batching is natural: a
// lone ack is sent at once and never delayed; acks that arrive while earlier
// calls of their queue are in flight go together in the next call.
//
// # Delays
//
// Up to Options.MaxHop (at most SQS's 15 minutes) a delay is SQS's own
// DelaySeconds, rounded up to the second: never early, up to a second late.
// Longer ETAs hop: the message carries its absolute not-before time, is sent
// with the longest delay, and when it arrives early is sent on again with
// what remains — never early, and late by at most a second plus one receive
// per hop. The received copy is deleted only after the copy sent on is
// accepted: if the send fails it is released for a few seconds instead and
// hops again when it comes back, and that Fetch returns the error.
// Standard queues do not order messages.
//
// # Limits
//
// A body holds at most 256 KiB less 1 KiB for errand's attributes, and only
// characters SQS accepts (no NUL or other control bytes): both are checked
// before anything is sent. Batches are 10 messages and at most 256 KiB.
// Stats are SQS's approximate counts; purge is PurgeQueue (on real SQS at
// most once a minute).
//
// # Operating
//
// Of the operator's capabilities the broker is a [driver.QueueLister]
// ([Broker.Queues]: the queues under the prefix, from ListQueues, without
// the dead-letter queues), a [driver.StatsReporter] (approximate counts)
// and a [driver.Purger]. SQS allows no archive listing or requeue (a
// dead-letter queue cannot be read without receiving its messages: use the
// console's redrive), no listing by state (SQS lists no messages), no
// heartbeats registry (no key-value store) and no sound pause (see
// docs/sqs.md, "Operating"): those calls return an error satisfying
// errors.Is(err, errors.ErrUnsupported). A task that fails for good is
// recorded FAILURE in the backend and its message acked; a message that
// cannot run (undecodable, too large, unknown task) goes to NAME-dead by
// Reject.
//
// # FIFO queues
//
// With Options.FIFO, queues are FIFO queues (NAME.fifo). By default each
// task is its own message group, so tasks run in parallel; a fixed
// Options.MessageGroupID delivers every task strictly in send order, one at a
// time. Deduplication is by a
// hash of the body — which holds the task UUID and attempt — so duplicates
// of one publish are dropped but retries are not. FIFO queues have no
// per-message delay: a delayed message is sent at once with its not-before
// time and made invisible until then when it arrives, and a release is
// ChangeMessageVisibility (one second at least).
package sqsbroker

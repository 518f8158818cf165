// Package amqpbroker is errand's RabbitMQ broker (AMQP 0-9-1), on
// github.com/rabbitmq/amqp091-go. docs/amqp.md gives the design and its
// reasons.
//
// # URL form
//
//	amqp://USER:PASS@HOST:5672/VHOST[?prefix=errand.&queue_type=quorum&max_priority=0&max_delay=298h&prefetch=0&prefetch_multiplier=3&max_payload=16777216&timeout=10s&heartbeat=5s&hold=1s]
//	amqps://USER:PASS@HOST:5671/VHOST?...
//	amqp://...?format=machinery[&exchange=machinery_exchange&exchange_type=direct&binding_key=machinery_task&default_queue=machinery_tasks&queue_declare_args={...}&queue_binding_args={...}]
//	                                  machinery v2's exchange, queues and JSON
//	                                  (Options.Machinery, MachineryOptions;
//	                                  docs/migrating-from-machinery.md)
//
// Import the package for its side effect to register both schemes with
// errand.OpenBroker, which checks that RabbitMQ accepts a connection. New
// takes the URL and *Options instead and connects on first use.
//
// # Queues
//
// One durable queue per routing key, PREFIX+key, quorum by default
// (Options.Classic for classic queues, which Options.MaxPriority gives
// priorities), published to through the default exchange with publisher
// confirms; rejected and archived messages go to PREFIX+key+".dead" with
// their reason in the errand-reason header. Queues are declared on first use; a publish
// RabbitMQ returns as unroutable (a queue deleted since) declares again and
// is sent once more.
//
// # Delivery semantics
//
// At-least-once: a delivery stays unacked on its channel until errand acks
// it, and RabbitMQ gives back what a lost connection held. One consumer per
// queue, with a prefetch of Options.PrefetchMultiplier (3; 1 on queues
// with priorities) times the largest Fetch limit (a worker's free slots):
// room for the deliveries a worker runs, as many it settles, and as many
// buffered in the broker,
// handed out by the next Fetch and given back (as copies, counting no
// delivery) after Options.HoldBuffered without one, and by Close. The
// lease is the broker's own timer: a delivery not settled or extended in
// time is given back (basic.nack, requeue) and a late settle answers
// driver.ErrLeaseLost. Extend makes one round trip on the delivery's
// channel; Ack waits for one sent after its acks, shared by concurrent
// Ack calls.
// Release publishes a copy (carrying the count of deliveries) and acks the
// delivery. RabbitMQ's consumer_timeout (30 min by
// default) closes the channel of a delivery held longer: raise it for
// longer tasks.
//
// # Delays
//
// Through binary delay levels, TTL queues PREFIX+key+".delay."+MS for MS =
// 64·2^k, which dead-letter back to the queue; a message that arrives early
// is sent on to the level that fits what remains. Never early; late by at
// most 64ms plus one trip through RabbitMQ when a worker is fetching. Any
// length: beyond Options.MaxDelay a message hops through the longest level
// again.
//
// # Limits and capabilities
//
// Bodies up to Options.MaxPayload (16 MiB). Stats (InFlight counts only this
// process's deliveries) and Purge. The archive (driver.Archiver) is the
// classic queue PREFIX+key+".dead", browsed: every entry taken with
// basic.get and given back but those a call removes; browses are
// serialised within a process, two processes browsing at once each see
// part of it, and Requeue publishes before it removes (a crash between
// sends twice). Pause (driver.Pauser) declares the marker queue
// PREFIX+key+".paused"; Paused lists the paused queues among those the
// Broker has used, and the first Fetch of a paused queue waits. AMQP cannot
// list queues or pending messages, or keep heartbeats, so those calls
// return an error satisfying errors.Is(err, errors.ErrUnsupported). While RabbitMQ
// blocks publishing (a memory or disk alarm) publishing calls fail with
// ErrBlocked; deliveries and acks use another connection and go on.
package amqpbroker

// Package machinerye2e tests errand against the real machinery v2: machinery
// producers and workers beside errand workers on machinery's own Redis and
// SQS queues and Redis and MongoDB result stores
// (docs/migrating-from-machinery.md). It is
// a test-only module: machinery and its many dependencies never reach a
// module users import.
//
// The tests use the servers of ERRAND_REDIS_URL (database 12 of its
// server: machinery keeps task states at bare UUIDs and its chord lock at
// a fixed key), ERRAND_SQS_ENDPOINT and ERRAND_MONGO_URI (a database of
// their own, dropped afterwards), each on queue and key names of its own
// run. ERRAND_REQUIRE_SERVICES=1 turns an unreachable server into a
// failure.
package machinerye2e

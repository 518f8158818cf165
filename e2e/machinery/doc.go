// Package machinerye2e tests errand against the real machinery v2: machinery
// producers and workers beside errand workers on machinery's own Redis and
// SQS queues and Redis result keys (docs/migrating-from-machinery.md). It is
// a test-only module: machinery and its many dependencies never reach a
// module users import.
package machinerye2e

// Package errandconfig reads errand's configuration from a YAML file and
// environment variables, and reads machinery v2's configuration (its YAML
// file and environment variables) into errand's, for migrating from
// machinery (docs/migrating-from-machinery.md). It is a module of its own
// (github.com/errand-go/errand/config) because YAML needs a library
// (go.yaml.in/yaml/v3) and errand's root module has no third-party
// dependencies.
//
// # errand's own configuration
//
// [Load] reads a YAML file, then the environment over it:
//
//	broker: redis://127.0.0.1:6379/0        # ERRAND_BROKER
//	backend: redis://127.0.0.1:6379/0       # ERRAND_BACKEND
//	default_queue: errand_tasks             # ERRAND_DEFAULT_QUEUE
//	worker:
//	  queues: {critical: 3, default: 1}     # ERRAND_QUEUES=critical:3,default:1
//	  concurrency: 10                       # ERRAND_CONCURRENCY
//	  lease: 30s                            # ERRAND_LEASE
//	  task_timeout: 5m                      # ERRAND_TASK_TIMEOUT
//	  shutdown_timeout: 30s                 # ERRAND_SHUTDOWN_TIMEOUT
//	  max_retries: 100                      # ERRAND_MAX_RETRIES
//	  unknown_task_attempts: 10             # ERRAND_UNKNOWN_TASK_ATTEMPTS
//
// Durations are Go's ("1m30s") or a number of seconds. Unknown keys are an
// error. [Settings.Open] opens the drivers by URL (import their packages,
// as for errand.OpenBroker) into an errand.Config; [Settings.WorkerConfig]
// gives the worker's.
//
// # machinery's configuration
//
// [LoadMachinery] reads machinery's YAML file (every key machinery knows
// is accepted) and machinery's environment variables (BROKER,
// DEFAULT_QUEUE, RESULT_BACKEND, RESULTS_EXPIRE_IN, REDIS_*, SQS_*; see
// [MachineryEnvNames]) over it; [FromMachinery] maps them onto [Settings]
// whose drivers speak machinery's formats (format=machinery URLs).
package errandconfig

package errand

import "github.com/errand-go/errand/driver"

// The driver package's types that users meet, under the names they use.
// They are aliases: a value of one is a value of the other.
type (
	// Broker is a broker driver: what a driver's constructor or
	// [OpenBroker] returns, and what [Config.Broker] takes.
	Broker = driver.Broker
	// Backend is a result backend driver: what a driver's constructor or
	// [OpenBackend] returns, and what [Config.Backend] takes.
	Backend = driver.Backend
	// State is where a task is in its life (see the package doc's
	// "Task states").
	State = driver.State
	// TaskState is what a backend stores for one task.
	TaskState = driver.TaskState
	// Result is one value a task returned.
	Result = driver.Result
	// Message is one encoded task on a queue, as [Server.List] lists it.
	Message = driver.Message
	// ArchiveEntry is a task set aside for good, as the archive keeps it.
	ArchiveEntry = driver.ArchiveEntry
	// Retention bounds a queue's archive (WorkerConfig.ArchiveRetention).
	Retention = driver.Retention
	// QueueStats counts what a queue holds, as [QueueInfo] carries it.
	QueueStats = driver.QueueStats
)

// The task states, with machinery's and Celery's names.
const (
	StatePending  = driver.StatePending  // sent, not yet taken by a worker
	StateReceived = driver.StateReceived // taken by a worker (again, after a redelivery or retry)
	StateStarted  = driver.StateStarted  // its function is running
	StateRetry    = driver.StateRetry    // failed; a later attempt is scheduled
	StateSuccess  = driver.StateSuccess  // finished with results (terminal)
	StateFailure  = driver.StateFailure  // failed for good (terminal)
	// StateCancelled: cancelled before or while it ran (terminal; see
	// Server.Cancel).
	StateCancelled = driver.StateCancelled
)

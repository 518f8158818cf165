package errand

import "github.com/errand-go/errand/internal/uuid"

// What the external tests (package errand_test) reach of the unexported.
var (
	NewUUID       = uuid.New
	FibonacciNext = fibonacciNext
)

// ValidateWorkerConfig is what NewWorker checks of cfg's queues.
func ValidateWorkerConfig(cfg WorkerConfig) error { return cfg.validate() }

// PortableBroker returns s's broker in the portable layer, as the server
// calls it.
func PortableBroker(s *Server) Broker { return s.broker }

package errand_test

import (
	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

func newLimited(n int) errand.Broker { return memorybroker.New(&memorybroker.Options{MaxPayload: n}) }

package core_test

import (
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/core"
)

func newLimited(n int) core.Broker { return memorybroker.New(&memorybroker.Options{MaxPayload: n}) }

package redisbroker_test

import (
	"testing"

	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestSentinelOpenErrorsHideCredentials: the master's and the sentinels'
// credentials in a redis-sentinel:// URL stay out of open errors and of
// errand.RedactURL. Port 1 refuses, so no sentinel answers; timeout=
// bounds the open's check (go-redis retries an unreachable sentinel set
// until the check's deadline).
func TestSentinelOpenErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	conformance.RunOpenRedaction(t, "broker", redistest.SentinelRedactionURLs("max_payload=lots"))
}

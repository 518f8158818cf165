package redisbroker_test

import (
	"testing"

	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

// TestSentinelOpenErrorsHideCredentials: the master's and the sentinels'
// credentials in a redis-sentinel:// URL stay out of open errors and of
// errand.RedactURL. Port 1 refuses, so no sentinel answers; timeout=
// bounds the open's check (go-redis retries an unreachable sentinel set
// until the check's deadline).
func TestSentinelOpenErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	conformance.RunOpenRedaction(t, "broker", map[string][]string{
		"redis-sentinel://alice:hunter2@127.0.0.1:1,127.0.0.1:2/0?master=m&timeout=500ms":                {"hunter2"},
		"redis-sentinel://hunter2@127.0.0.1:1/0?master=m&timeout=500ms":                                  {"hunter2"},
		"redis-sentinel://127.0.0.1:1/0?master=m&timeout=500ms&sentinel_password=s3cret":                 {"s3cret"},
		"redis-sentinel://:hunter2@127.0.0.1:1/0?master=m&timeout=500ms&sentinel_password=p%40ss%2Fword": {"hunter2", "p@ss/word", "p%40ss%2Fword"},
		"rediss-sentinel://alice:p%40ss%2Fhunter2@127.0.0.1:1/0?master=m&timeout=500ms":                  {"p@ss/hunter2", "p%40ss%2Fhunter2"},
		"redis-sentinel://alice:hunter2@127.0.0.1:1/0?timeout=500ms":                                     {"hunter2"},
		"redis-sentinel://alice:hunter2@127.0.0.1:1/0?master=m&timeout=500ms&sentinel_username=w":        {"hunter2"},
		"redis-sentinel://alice:hunter2@127.0.0.1:1/0?master=m&timeout=500ms&max_payload=lots":           {"hunter2"},
	})
}

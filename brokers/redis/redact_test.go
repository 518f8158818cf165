package redisbroker_test

import (
	"testing"

	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

// TestOpenErrorsHideCredentials: every credential form a redis:// URL
// carries stays out of open errors (issue 15, item 6). Port 1 refuses.
func TestOpenErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	conformance.RunOpenRedaction(t, "broker", map[string][]string{
		"redis://alice:hunter2@127.0.0.1:1/0":                  {"hunter2"},
		"redis://hunter2@127.0.0.1:1/0":                        {"hunter2"},
		"redis://alice@127.0.0.1:1/0?password=hunter2":         {"hunter2"},
		"rediss://alice:p%40ss%2Fhunter2@127.0.0.1:1/0":        {"p@ss/hunter2", "p%40ss%2Fhunter2"},
		"redis://:hunter2@127.0.0.1:1/0?addr=127.0.0.1:2":      {"hunter2"},
		"redis://alice:hunter2@127.0.0.1:1/0?max_payload=lots": {"hunter2"},
	})
}

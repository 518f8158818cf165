package mongobackend_test

import (
	"testing"

	_ "github.com/errand-go/errand/backends/mongo"
	"github.com/errand-go/errand/conformance"
)

// TestOpenErrorsHideCredentials: credentials in a mongodb:// URL stay out
// of open errors (issue 15, item 6). Port 1 refuses; server selection gives
// up quickly.
func TestOpenErrorsHideCredentials(t *testing.T) {
	conformance.RunOpenRedaction(t, "backend", map[string][]string{
		"mongodb://alice:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=300":             {"hunter2"},
		"mongodb://alice:p%40ss%2Fhunter2@127.0.0.1:1/?serverSelectionTimeoutMS=300":    {"p@ss/hunter2", "p%40ss%2Fhunter2"},
		"mongodb://alice:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=300&authSource=": {"hunter2"},
		"mongodb://alice:hunter2@127.0.0.1:1/?result_expiry=never":                      {"hunter2"},
	})
}

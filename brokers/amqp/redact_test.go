package amqpbroker_test

import (
	"testing"

	_ "github.com/errand-go/errand/brokers/amqp"
	"github.com/errand-go/errand/conformance"
)

// TestOpenErrorsHideCredentials: the password of an amqp:// or amqps://
// URL (plain, escaped, in either scheme) never shows in the error of an
// open that fails, by a refused port or a bad option.
func TestOpenErrorsHideCredentials(t *testing.T) {
	conformance.RunOpenRedaction(t, "broker", map[string][]string{
		"amqp://errand:hunter2secret@127.0.0.1:1/?timeout=2s":                {"hunter2secret"},
		"amqps://errand:hunter2secret@127.0.0.1:1/vhost?timeout=2s":          {"hunter2secret"},
		"amqp://errand:hunter2%40s%3Acret@127.0.0.1:1/?timeout=2s":           {"hunter2@s:cret", "hunter2%40s%3Acret"},
		"amqp://errand:hunter2secret@127.0.0.1:1/?queue_type=stream":         {"hunter2secret"},
		"amqp://errand:hunter2secret@127.0.0.1:1/?max_delay=soon&timeout=2s": {"hunter2secret"},
	})
}

package sqsbroker_test

import (
	"testing"

	_ "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
)

// TestOpenErrorsHideCredentials: AWS credentials put in an sqs:// URL
// (errand never reads them from there: they come from the AWS chain) are
// never printed back (issue 15, item 6). A bad option makes Open fail.
func TestOpenErrorsHideCredentials(t *testing.T) {
	conformance.RunOpenRedaction(t, "broker", map[string][]string{
		"sqs://AKIAHUNTER2EXAMPLE:hunter2secret@127.0.0.1:1/?region=us-east-1&max_hop=soon":                          {"AKIAHUNTER2EXAMPLE", "hunter2secret"},
		"sqs://AKIAHUNTER2EXAMPLE@127.0.0.1:1/?region=us-east-1&max_hop=soon":                                        {"AKIAHUNTER2EXAMPLE"},
		"sqs://127.0.0.1:1/?aws_access_key_id=AKIAHUNTER2EXAMPLE&aws_secret_access_key=hunter2secret&max_hop=soon":   {"AKIAHUNTER2EXAMPLE", "hunter2secret"},
		"sqs://127.0.0.1:1/?access_key=AKIAHUNTER2EXAMPLE&secret_key=hunter2secret&session_token=tok3n&max_hop=soon": {"AKIAHUNTER2EXAMPLE", "hunter2secret", "tok3n"},
	})
}

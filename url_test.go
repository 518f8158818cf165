package errand_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/memory"
	_ "github.com/errand-go/errand/brokers/memory"
)

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"redis://user:hunter2@host:6379/0":                 "redis://user:xxxxx@host:6379/0",
		"rediss://:hunter2@host:6380":                      "rediss://:xxxxx@host:6380",
		"sqs://host/q?secret_key=hunter2&region=eu-west-1": "sqs://host/q?region=eu-west-1&secret_key=xxxxx",
		"memory://":                             "memory:",
		"mongodb://h:27017/db?password=hunter2": "mongodb://h:27017/db?password=xxxxx",
		// A username without a password may itself be the secret.
		"redis://hunter2@host/0": "redis://xxxxx@host/0",
		// issue 15 item 6: a password query parameter beside a user.
		"redis://alice@host/0?password=hunter2": "redis://xxxxx@host/0?password=xxxxx",
		// An SQS access key ID in userinfo or the query is a credential.
		"sqs://AKIAHUNTER2:hunter2@host/q":                                        "sqs://xxxxx:xxxxx@host/q",
		"sqs://host/?aws_access_key_id=AKIAHUNTER2&aws_secret_access_key=hunter2": "sqs://host/?aws_access_key_id=xxxxx&aws_secret_access_key=xxxxx",
		"sqs://host/?AccessKeyId=AKIAHUNTER2&SessionToken=hunter2":                "sqs://host/?AccessKeyId=xxxxx&SessionToken=xxxxx",
		// A PostgreSQL username is a role name, kept (errors name it);
		// its password is hidden wherever it is.
		"postgres://errand@host/db":                  "postgres://errand@host/db",
		"postgresql://errand:hunter2@host/db":        "postgresql://errand:xxxxx@host/db",
		"postgres://errand@host/db?password=hunter2": "postgres://errand@host/db?password=xxxxx",
	}
	for in, want := range cases {
		got := errand.RedactURL(in)
		if strings.Contains(got, "hunter2") || strings.Contains(got, "AKIA") {
			t.Errorf("RedactURL(%q) = %q leaks the secret", in, got)
		}
		if want != "memory:" && got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOpenByURL(t *testing.T) {
	ctx := context.Background()
	b1, err := errand.OpenBroker(ctx, "memory://shared-q")
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	b2, _ := errand.OpenBroker(ctx, "memory://shared-q")
	msg := errand.Message{ID: "m", Queue: "q", Body: []byte("x")}
	if err := b1.Publish(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if ds, err := b2.Fetch(ctx, "q", 1, time.Minute); err != nil || len(ds) != 1 || ds[0].ID != "m" {
		t.Fatalf("memory://NAME opened twice: a message published on one was not fetched from the other (%v, %v); want one shared broker", ds, err)
	}
	be, err := errand.OpenBackend(ctx, "memory://?result_expiry=2m")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	_, err = errand.OpenBroker(ctx, "nosuch://u:hunter2@h")
	if err == nil || !strings.Contains(err.Error(), `"nosuch"`) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("unknown scheme error %v: want it named, without the password", err)
	}
	_, err = errand.OpenBackend(ctx, "memory://x?result_expiry=soon")
	if err == nil || !strings.Contains(err.Error(), "result_expiry") {
		t.Fatalf("bad option error = %v", err)
	}
}

// TestMalformedURLSaysWhy: a URL that does not parse is refused with the
// parser's reason, never the URL's secrets (issue 14, item 5: the reason
// was hidden).
func TestMalformedURLSaysWhy(t *testing.T) {
	_, err := errand.OpenBroker(context.Background(), "sqs://alice:hunter2@host:port/q")
	if err == nil || !strings.Contains(err.Error(), "invalid port") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenBroker(malformed) = %v; want the parser's reason (invalid port), without the password", err)
	}
	_, err = errand.OpenBackend(context.Background(), "redis://h/%zz")
	if err == nil || !strings.Contains(err.Error(), "invalid URL escape") {
		t.Fatalf("OpenBackend(bad escape) = %v; want the parser's reason", err)
	}
}

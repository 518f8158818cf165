package sqsbroker_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/errand-go/errand"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// TestMachineryConformance runs the kit's broker and worker cases on the
// broker in machinery's format (Options.Machinery: queue names as they
// are, machinery's JSON).
func TestMachineryConformance(t *testing.T) {
	t.Parallel()
	c := client(t)
	h := harnessOf(c, &sqsbroker.Options{Machinery: true, MaxHop: hop})
	conformance.RunBroker(t, h)
	conformance.RunWorker(t, h, conformance.MemoryBackend())
}

// TestMachineryUntranslatedBodyKept: a body errand passed on as it was (not
// the signature of its message: here a signature of another UUID that
// carries an Attempt) comes back byte for byte; the translation back runs
// only on what machinery sent and what errand translated.
func TestMachineryUntranslatedBodyKept(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	b := sqsbroker.New(c, &sqsbroker.Options{Machinery: true, MaxHop: hop})
	defer b.Close()
	q := "errand-test-mraw-" + rand.Text()
	body := []byte(`{"UUID":"another","Name":"t","Attempt":3,"RetryCount":5}`)
	if err := b.Publish(ctx, errand.Message{ID: "msg-1", Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	var ds []*driver.Delivery
	for deadline := time.Now().Add(10 * time.Second); len(ds) == 0 && time.Now().Before(deadline); {
		var err error
		if ds, err = b.Fetch(ctx, q, 1, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if len(ds) != 1 || ds[0].ID != "msg-1" || string(ds[0].Body) != string(body) {
		t.Fatalf("fetched %v; want msg-1 with its body unchanged %s", ds, body)
	}
	if errs := b.Ack(ctx, ds); errs != nil && errs[0] != nil {
		t.Error(errs[0])
	}
}

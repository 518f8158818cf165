package mongobackend_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	gomongo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand"
	mongobackend "github.com/errand-go/errand/backends/mongo"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// client connects to ERRAND_MONGO_URI (FerretDB from scripts/services, or a
// real MongoDB).
func client(t *testing.T) *gomongo.Client {
	uri := os.Getenv("ERRAND_MONGO_URI")
	if uri == "" {
		conformance.ServiceUnavailable(t, "ERRAND_MONGO_URI is not set (scripts/services start exports it)")
	}
	c, err := gomongo.Connect(options.Client().ApplyURI(uri).SetTimeout(10 * time.Second))
	if err != nil {
		t.Fatalf("ERRAND_MONGO_URI: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx, nil); err != nil {
		conformance.ServiceUnavailable(t, "MongoDB unreachable: "+err.Error())
	}
	t.Cleanup(func() { c.Disconnect(context.Background()) })
	return c
}

func harness(c *gomongo.Client) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			// Each case its own collections: FerretDB's SQLite handler
			// answers more slowly as a collection grows, so cases sharing
			// one would slow each other down (and a long-lived server
			// would slow every later run).
			prefix := "kit" + strings.ToLower(rand.Text()[:10])
			b, err := mongobackend.New(context.Background(), c, &mongobackend.Options{Database: "errand_test", Prefix: prefix, ResultExpiry: expiry})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 300 * time.Millisecond, Durable: true, Cancel: true},
	}
}

func TestConformance(t *testing.T) {
	c := client(t)
	conformance.RunBackend(t, harness(c))
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), harness(c))
}

func TestOpenByURL(t *testing.T) {
	client(t)
	uri := os.Getenv("ERRAND_MONGO_URI")
	u := strings.Replace(uri, "/?", "/errand_url?", 1) + "&prefix=x&result_expiry=1m"
	b, err := errand.OpenBackend(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if e := b.(driver.Expirer).ResultExpiry(); e != time.Minute {
		t.Fatalf("result_expiry=1m gave %v", e)
	}
	id := rand.Text()
	if err := errors.Join(b.SetStates(context.Background(), []*errand.TaskState{{TaskUUID: id, State: errand.StatePending}})...); err != nil {
		t.Fatal(err)
	}
	if _, err := errand.OpenBackend(context.Background(), "mongodb://u:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=200"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("unreachable server: %v (want an error without the password)", err)
	}
}

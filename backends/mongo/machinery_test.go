package mongobackend_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	gomongo "go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/errand-go/errand"
	mongobackend "github.com/errand-go/errand/backends/mongo"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
)

func machineryHarness(c *gomongo.Client) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			// Each case its own database (machinery's collection names are
			// fixed: tasks, group_metas).
			db := "mkit" + strings.ToLower(rand.Text()[:10])
			b := mongobackend.NewMachinery(c, &mongobackend.MachineryOptions{Database: db, ResultsExpireIn: expiry})
			t.Cleanup(func() {
				b.Close()
				c.Database(db).Drop(context.Background())
			})
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 300 * time.Millisecond, Durable: true, Cancel: true},
	}
}

// TestMachineryConformance runs the kit's backend and worker cases on the
// backend in machinery's format.
func TestMachineryConformance(t *testing.T) {
	c := client(t)
	conformance.RunBackend(t, machineryHarness(c))
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), machineryHarness(c))
}

// TestMachineryDeleteAtOnlyOnFinalStates: like machinery's Mongo backend,
// only SUCCESS and FAILURE carry delete_at (the field its TTL index
// expires): a task running or waiting for a retry longer than the results
// expiry keeps its document, and a final state gets its expiry.
func TestMachineryDeleteAtOnlyOnFinalStates(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	db := "mkit" + strings.ToLower(rand.Text()[:10])
	defer c.Database(db).Drop(ctx)
	b := mongobackend.NewMachinery(c, &mongobackend.MachineryOptions{Database: db, ResultsExpireIn: time.Hour})
	defer b.Close()
	has := func(id string) bool {
		t.Helper()
		var doc bson.M
		if err := c.Database(db).Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		_, ok := doc["delete_at"]
		return ok
	}
	for _, s := range []errand.State{errand.StatePending, errand.StateReceived, errand.StateStarted, errand.StateRetry, errand.StateSuccess, errand.StateFailure} {
		id := "t-" + string(s)
		if errs := b.SetStates(ctx, []*errand.TaskState{{TaskUUID: id, TaskName: "x", State: s, CreatedAt: time.Now()}}); errs != nil && errs[0] != nil {
			t.Fatal(errs[0])
		}
		if got, want := has(id), s.Terminal(); got != want {
			t.Errorf("state %s: delete_at present %v, want %v (machinery expires only final states)", s, got, want)
		}
	}
}

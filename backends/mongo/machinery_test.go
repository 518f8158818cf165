package mongobackend_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

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
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 300 * time.Millisecond, Durable: true},
	}
}

// TestMachineryConformance runs the kit's backend and worker cases on the
// backend in machinery's format.
func TestMachineryConformance(t *testing.T) {
	c := client(t)
	conformance.RunBackend(t, machineryHarness(c))
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), machineryHarness(c))
}

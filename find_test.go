package errand_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// listerOnly hides the memory broker's Finder: Server.Task pages through
// the lists instead.
type listerOnly struct{ driver.Broker }

func (b listerOnly) List(ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error) {
	return b.Broker.(driver.Lister).List(ctx, q, s, offset, limit)
}

// countingFinder counts Find calls and List calls.
type countingFinder struct {
	*memorybroker.Broker
	finds, lists int
}

func (b *countingFinder) Find(ctx context.Context, q, id string) (driver.Listed, driver.ListState, bool, error) {
	b.finds++
	return b.Broker.Find(ctx, q, id)
}

func (b *countingFinder) List(ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error) {
	b.lists++
	return b.Broker.List(ctx, q, s, offset, limit)
}

// Server.Task finds a task on its list through driver.Finder in one call,
// and, on a broker without it, by paging through the lists.
func TestServerTaskFinds(t *testing.T) {
	for _, finder := range []bool{true, false} {
		mb := memorybroker.New(nil)
		cf := &countingFinder{Broker: mb}
		var br errand.Broker = cf
		if !finder {
			br = listerOnly{mb}
		}
		be := memorybackend.New(nil)
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		later := errand.NewSignature("x")
		eta := time.Now().Add(time.Hour)
		later.ETA = &eta
		if _, err := srv.SendTask(ctx, later); err != nil {
			t.Fatal(err)
		}
		now := errand.NewSignature("x")
		if _, err := srv.SendTask(ctx, now); err != nil {
			t.Fatal(err)
		}
		q := errand.DefaultQueue
		for _, w := range []struct {
			id   string
			list errand.ListState
		}{{later.UUID, errand.ListScheduled}, {now.UUID, errand.ListPending}} {
			ti, err := srv.Task(ctx, q, w.id)
			if err != nil || ti.List != w.list || ti.Signature == nil || ti.Signature.UUID != w.id {
				t.Errorf("Finder %v: Server.Task(%s) = %+v, %v; want it on %s", finder, w.id, ti, err, w.list)
			}
		}
		if _, err := srv.Task(ctx, q, "never-sent"); !errors.Is(err, errand.ErrTaskNotFound) {
			t.Errorf("Finder %v: Server.Task of an unknown ID = %v, want ErrTaskNotFound", finder, err)
		}
		if finder && (cf.finds != 3 || cf.lists != 0) {
			t.Errorf("over a driver.Finder, Server.Task made %d Find and %d List calls for 3 lookups; want 3 and 0", cf.finds, cf.lists)
		}
		mb.Close()
		be.Close()
	}
}

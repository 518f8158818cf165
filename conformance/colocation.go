package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

// The Worker/Colocation cases (driver.Colocator, BrokerCaps.Colocate):
// Colocation/Send (colocation_send.go), Colocation/Start (colocation_start.go)
// and Colocation/Settle (colocation_settle.go). Each asks the broker driver to
// co-locate with the raw backend the backend harness made, checks the
// answered call directly, then runs a real Server over a wrapper of the
// broker that exposes that one call (counted, and recorded in the tasks'
// paths) and keeps the other two on the portable path, through the
// recording backend. A pair that is not co-located (Colocate answers nil)
// is logged and checked no further; a backend no driver can know — one
// declaring a location of the kit's own type, or none — must get nil.

// strangerBackend is a backend no driver can know: it declares a location
// of an unexported type of the kit's. Colocate must answer nil for it.
type strangerBackend struct{ driver.Backend }

type strangerLocation struct{ server string }

func (strangerBackend) Location() any { return &strangerLocation{server: "the kit's"} }

// colocated reports whether p's broker harness declares Colocate; when
// it does not, it logs that the case has nothing to check.
func colocated(t testing.TB, p workerPair) bool {
	if !p.broker.Caps.Colocate {
		t.Logf("the broker harness does not declare Colocate: nothing to check (Broker/Capabilities checks that the broker is no driver.Colocator)")
	}
	return p.broker.Caps.Colocate
}

// colocate asks drv to co-locate with the strangers (nil wanted) and then
// with be, and returns drv as the driver.Colocator and its answer for be;
// when that answer is nil it logs what errand does instead (portable) and
// that the case checks nothing more.
func colocate(t testing.TB, drv errand.Broker, be errand.Backend, part, portable string) (driver.Colocator, driver.Colocation) {
	t.Helper()
	c, ok := drv.(driver.Colocator)
	if !ok {
		t.Fatalf("capabilities promise broken: the harness declares Colocate but %T does not implement driver.Colocator", drv)
	}
	strangers := []driver.Backend{strangerBackend{newStrangerStore()}, newStrangerStore()}
	t.Cleanup(func() {
		for _, s := range strangers {
			s.Close()
		}
	})
	for _, s := range strangers {
		if c.Colocate(s) != nil {
			t.Errorf("co-location promise broken: Colocate answered calls for %T, a backend the broker cannot know; want nil (driver.Colocator: its %s would write states where that backend never reads them)", s, part)
		}
	}
	coloc := c.Colocate(be)
	if coloc == nil {
		t.Logf("%T is not co-located with %T (Colocate answered nil); errand %s, and this case checks nothing more", drv, be, portable)
	}
	return c, coloc
}

// newStrangerStore is a backend that declares no location: a memory
// backend with its driver.Located hidden.
func newStrangerStore() strangerStore {
	return strangerStore{memorybackend.New(nil)}
}

type strangerStore struct{ driver.Backend }

// partialColocation is the Colocation errand gets from a case's broker
// wrapper: the call under test (send, fetchStart or settle; nil: not
// under test) goes to the driver, the others take the portable path
// through the wrapper broker and the backend errand holds, so that they
// are counted and recorded as without co-location.
type partialColocation struct {
	broker errand.Broker
	held   errand.Backend

	send       func(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error)
	fetchStart func(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error)
	settle     func(ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error
}

func (p *partialColocation) Send(ctx context.Context, sts []*errand.TaskState, msgs []errand.Message) (bool, error) {
	if p.send != nil {
		return p.send(ctx, sts, msgs)
	}
	var errs []error
	if pw, ok := p.held.(driver.PendingWriter); ok {
		errs = pw.SetPendingIfAbsent(ctx, sts)
	} else {
		errs = p.held.SetStates(ctx, sts)
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if err := p.broker.Publish(ctx, msgs...); err != nil {
		return false, err
	}
	return true, nil
}

func (p *partialColocation) FetchStart(ctx context.Context, queue string, limit int, lease time.Duration, tasks []string) ([]*driver.Delivery, []*driver.StartResult, time.Time, error) {
	if p.fetchStart != nil {
		return p.fetchStart(ctx, queue, limit, lease, tasks)
	}
	ds, err := p.broker.Fetch(ctx, queue, limit, lease)
	return ds, nil, time.Time{}, err
}

func (p *partialColocation) Settle(ctx context.Context, ds []*driver.Delivery, sts []*errand.TaskState) []error {
	if p.settle != nil {
		return p.settle(ctx, ds, sts)
	}
	if err := errors.Join(p.held.SetStates(ctx, sts)...); err != nil {
		return driver.BatchErrors(len(ds), err)
	}
	return p.broker.Ack(ctx, ds)
}

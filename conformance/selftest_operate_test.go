package conformance

// Broken variants of the memory broker's operator capabilities (the archive,
// lists by state, queues, pause flags, heartbeats), for the self-test.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

func (b *brokenBroker) Archive(ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	if b.archive != nil {
		return b.archive(b, ctx, d, e, keep)
	}
	return b.Broker.Archive(ctx, d, e, keep)
}
func (b *brokenBroker) Requeue(ctx context.Context, q, id string, m errand.Message) error {
	if b.requeue != nil {
		return b.requeue(b, ctx, q, id, m)
	}
	return b.Broker.Requeue(ctx, q, id, m)
}
func (b *brokenBroker) DeleteArchived(ctx context.Context, q string, ids ...string) (int, error) {
	if b.deleteArchived != nil {
		return b.deleteArchived(b, ctx, q, ids...)
	}
	return b.Broker.DeleteArchived(ctx, q, ids...)
}
func (b *brokenBroker) List(ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error) {
	if b.list != nil {
		return b.list(b, ctx, q, s, offset, limit)
	}
	return b.Broker.List(ctx, q, s, offset, limit)
}
func (b *brokenBroker) Queues(ctx context.Context) ([]string, error) {
	if b.queues != nil {
		return b.queues(b, ctx)
	}
	return b.Broker.Queues(ctx)
}
func (b *brokenBroker) Pause(ctx context.Context, q string) error {
	if b.pause != nil {
		return b.pause(b, ctx, q)
	}
	return b.Broker.Pause(ctx, q)
}
func (b *brokenBroker) Beat(ctx context.Context, id string, data []byte, ttl time.Duration) error {
	if b.beat != nil {
		return b.beat(b, ctx, id, data, ttl)
	}
	return b.Broker.Beat(ctx, id, data, ttl)
}
func (b *brokenBroker) Unbeat(ctx context.Context, id string) error {
	if b.unbeat != nil {
		return b.unbeat(b, ctx, id)
	}
	return b.Broker.Unbeat(ctx, id)
}

func (b *brokenBroker) Find(ctx context.Context, q, id string) (driver.Listed, driver.ListState, bool, error) {
	if b.find != nil {
		return b.find(b, ctx, q, id)
	}
	return b.Broker.Find(ctx, q, id)
}

// knowsEveryQueue is a broker whose KnowsQueue (driver.QueueKnower) says
// yes to any name.
type knowsEveryQueue struct{ *brokenBroker }

func (knowsEveryQueue) KnowsQueue(context.Context, string) (bool, error) { return true, nil }

// brokenOperators join brokenBrokers (see init there).
var brokenOperators = map[string]BrokerHarness{
	// Keeps the entry without its last error.
	"archive-loses-error": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
			e.Error = ""
			return b.Broker.Archive(ctx, d, e, keep)
		}
	}),
	// Keeps every entry forever.
	"retention-ignored": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, _ driver.Retention) error {
			return b.Broker.Archive(ctx, d, e, driver.Retention{})
		}
	}),
	// Bounds the count but never drops old entries.
	"retention-ignores-age": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
			keep.MaxAge = 0
			return b.Broker.Archive(ctx, d, e, keep)
		}
	}),
	// Publishes first, then removes the entry: a second or concurrent
	// Requeue publishes again before it learns the entry is gone.
	"requeue-not-atomic": brokenBrokerHarness(func(b *brokenBroker) {
		b.requeue = func(b *brokenBroker, ctx context.Context, q, id string, m errand.Message) error {
			if err := b.Broker.Publish(ctx, m); err != nil {
				return err
			}
			if n, err := b.Broker.DeleteArchived(ctx, q, id); err != nil || n == 0 {
				return fmt.Errorf("requeue %s: %w", id, errand.ErrNotArchived)
			}
			return nil
		}
	}),
	// Counts the entries but deletes none.
	"delete-archived-keeps": brokenBrokerHarness(func(b *brokenBroker) {
		b.deleteArchived = func(b *brokenBroker, ctx context.Context, q string, ids ...string) (int, error) {
			n := 0
			for _, id := range ids {
				if _, err := b.Broker.ArchivedEntry(ctx, q, id); err == nil {
					n++
				}
			}
			return n, nil
		}
	}),
	// Lists the pending messages as in flight.
	"list-wrong-state": brokenBrokerHarness(func(b *brokenBroker) {
		b.list = func(b *brokenBroker, ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error) {
			if s == driver.ListInFlight {
				s = driver.ListPending
			}
			return b.Broker.List(ctx, q, s, offset, limit)
		}
	}),
	// Lists completed messages oldest first.
	"completed-oldest-first": brokenBrokerHarness(func(b *brokenBroker) {
		b.list = func(b *brokenBroker, ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error) {
			if s != driver.ListCompleted {
				return b.Broker.List(ctx, q, s, offset, limit)
			}
			all, err := b.Broker.List(ctx, q, s, 0, memorybroker.MaxCompleted)
			slices.Reverse(all)
			all = all[min(offset, len(all)):]
			return all[:min(limit, len(all))], err
		}
	}),
	// Lists only the queues that hold messages now.
	"queues-from-contents": brokenBrokerHarness(func(b *brokenBroker) {
		b.queues = func(b *brokenBroker, ctx context.Context) ([]string, error) {
			qs, err := b.Broker.Queues(ctx)
			return slices.DeleteFunc(qs, func(q string) bool {
				st, _ := b.Broker.Stats(ctx, q)
				return st.Pending+st.Delayed+st.InFlight == 0
			}), err
		}
	}),
	// Knows every name: Server.Queue of a name never used answers zeros
	// instead of ErrUnknownQueue.
	"knows-every-queue": func() BrokerHarness {
		h := healthyBroker()
		h.New = func(t testing.TB) errand.Broker {
			b := &brokenBroker{Broker: memorybroker.New(nil)}
			t.Cleanup(func() { b.Broker.Close() })
			return knowsEveryQueue{b}
		}
		return h
	}(),
	// Pause does nothing.
	"pause-flag-lost": brokenBrokerHarness(func(b *brokenBroker) {
		b.pause = func(*brokenBroker, context.Context, string) error { return nil }
	}),
	// A heartbeat lives an hour, whatever its ttl.
	"heartbeat-never-expires": brokenBrokerHarness(func(b *brokenBroker) {
		b.beat = func(b *brokenBroker, ctx context.Context, id string, data []byte, _ time.Duration) error {
			return b.Broker.Beat(ctx, id, data, time.Hour)
		}
	}),
	// Unbeat does nothing: a worker shut down stays listed until its ttl.
	"unbeat-is-a-no-op": brokenBrokerHarness(func(b *brokenBroker) {
		b.unbeat = func(*brokenBroker, context.Context, string) error { return nil }
	}),
	// Archive acks: what fails for good vanishes.
	"archive-acks-instead": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, _ driver.ArchiveEntry, _ driver.Retention) error {
			return ack1(b.Broker, ctx, d)
		}
	}),
	// Archive keeps the entry without the message's body.
	"archive-drops-body": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
			e.Body = []byte{}
			return b.Broker.Archive(ctx, d, e, keep)
		}
	}),
	// Archives a delivery whatever its lease: a stalled consumer's late
	// Archive succeeds (here: pretends to) while another holds the message.
	"archive-ignores-lease": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
			if err := b.Broker.Archive(ctx, d, e, keep); !errors.Is(err, driver.ErrLeaseLost) {
				return err
			}
			return nil
		}
	}),
	// An entry with no message keeps d's ID but no body.
	"archive-empty-message-loses-body": brokenBrokerHarness(func(b *brokenBroker) {
		b.archive = func(b *brokenBroker, ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
			if e.ID == "" {
				e.ID, e.Queue = d.ID, d.Queue
			}
			return b.Broker.Archive(ctx, d, e, keep)
		}
	}),
	// A page with limit 0 (or below) is empty instead of an error.
	"page-limit-zero-accepted": brokenBrokerHarness(func(b *brokenBroker) {
		b.list = func(b *brokenBroker, ctx context.Context, q string, s driver.ListState, offset, limit int) ([]driver.Listed, error) {
			if limit < 1 {
				return nil, nil
			}
			return b.Broker.List(ctx, q, s, offset, limit)
		}
	}),
	// Find does not look at the messages in flight.
	"find-misses-in-flight": brokenBrokerHarness(func(b *brokenBroker) {
		b.find = func(b *brokenBroker, ctx context.Context, q, id string) (driver.Listed, driver.ListState, bool, error) {
			l, s, ok, err := b.Broker.Find(ctx, q, id)
			if s == driver.ListInFlight {
				return driver.Listed{}, "", false, err
			}
			return l, s, ok, err
		}
	}),
	// Implements the archive but does not declare it.
	"undeclared-archive": func() BrokerHarness {
		h := healthyBroker()
		h.Caps.Archive = false
		return h
	}(),
}

package conformance

// The memory drivers' transactional writes (driver.Transactor), broken in
// parts, for the self-test of the Worker/Tx cases.

import (
	"context"
	"testing"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// txBroker is errand's memory broker with its Publish inside a
// transaction, or its CheckTx, replaced. Its co-location is hidden
// (Colocate answers nil), so every send reaches its Publish.
type txBroker struct {
	*memorybroker.Broker
	publishInTx func(b *txBroker, ctx context.Context, msgs []errand.Message) error // a Publish whose ctx carries a tx
	checkTx     func(b *txBroker, tx any) error
}

func (b *txBroker) Publish(ctx context.Context, msgs ...errand.Message) error {
	if b.publishInTx != nil && driver.TxFrom(ctx) != nil {
		return b.publishInTx(b, ctx, msgs)
	}
	return b.Broker.Publish(ctx, msgs...)
}

func (b *txBroker) CheckTx(tx any) error {
	if b.checkTx != nil {
		return b.checkTx(b, tx)
	}
	return b.Broker.CheckTx(tx)
}

func (b *txBroker) Colocate(driver.Backend) driver.Colocation { return nil }

func txBrokerHarness(mod func(b *txBroker)) BrokerHarness {
	h := healthyBroker()
	h.New = func(t testing.TB) errand.Broker {
		b := &txBroker{Broker: memorybroker.New(nil)}
		mod(b)
		t.Cleanup(func() { b.Broker.Close() })
		return b
	}
	return h
}

// outsideTx is ctx without its transaction: a write made under it is
// visible at once and survives a rollback.
func outsideTx(ctx context.Context) context.Context { return driver.WithTx(ctx, nil) }

func init() {
	// Broken brokers.
	for name, h := range map[string]BrokerHarness{
		// Publishes at once, ignoring the transaction: a consumer fetches the
		// task before the commit, and a rollback leaves it queued.
		"tx-publishes-outside": txBrokerHarness(func(b *txBroker) {
			b.publishInTx = func(b *txBroker, ctx context.Context, msgs []errand.Message) error {
				return b.Broker.Publish(outsideTx(ctx), msgs...)
			}
		}),
		// Keeps nothing of a publish inside a transaction: its commit loses
		// the messages, and the task never runs.
		"tx-loses-messages": txBrokerHarness(func(b *txBroker) {
			b.publishInTx = func(*txBroker, context.Context, []errand.Message) error { return nil }
		}),
		// Accepts any transaction, and publishes outside one it does not
		// know: errand sends, and the caller believes the send waits for a
		// commit that can never include it.
		"tx-accepts-any": txBrokerHarness(func(b *txBroker) {
			b.checkTx = func(*txBroker, any) error { return nil }
			b.publishInTx = func(b *txBroker, ctx context.Context, msgs []errand.Message) error {
				if b.Broker.CheckTx(driver.TxFrom(ctx)) != nil {
					ctx = outsideTx(ctx)
				}
				return b.Broker.Publish(ctx, msgs...)
			}
		}),
	} {
		brokenBrokers[name] = h
	}

	// Broken backends, declaring Tx. The memory broker co-locates with
	// them through the healthy backend they wrap, so the cases' portable
	// run (the backend's location hidden) is the one that reaches them.
	for name, h := range map[string]BackendHarness{
		// Writes states outside the transaction it accepted: PENDING is
		// visible before the commit and survives a rollback.
		"tx-states-outside": brokenBackendHarness(func(b *brokenBackend) {
			b.setStates = func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error {
				return b.Backend.SetStates(outsideTx(ctx), sts)
			}
		}),
		// Keeps nothing of a state write inside a transaction: after the
		// commit the task has no state.
		"tx-loses-states": brokenBackendHarness(func(b *brokenBackend) {
			b.setStates = func(b *brokenBackend, ctx context.Context, sts []*errand.TaskState) []error {
				if driver.TxFrom(ctx) != nil {
					return nil
				}
				return b.Backend.SetStates(ctx, sts)
			}
		}),
		// Records a chord's group outside the transaction: a rolled-back
		// SendChord leaves its group behind.
		"tx-group-outside": brokenBackendHarness(func(b *brokenBackend) {
			b.initGroup = func(b *brokenBackend, ctx context.Context, g string, ids []string) error {
				return b.Backend.InitGroup(outsideTx(ctx), g, ids)
			}
		}),
	} {
		brokenBackends[name] = h
	}

	workerTargets["Tx/Commit"] = "broker:tx-publishes-outside"
	workerTargets["Tx/Rollback"] = "broker:tx-publishes-outside"
	workerTargets["Tx/Workflows"] = "backend:tx-group-outside"
	workerTargets["Tx/Refused"] = "broker:tx-accepts-any"
	extraWorkerTargets = append(extraWorkerTargets,
		target{"Tx/Commit", "broker:tx-loses-messages"},
		target{"Tx/Commit", "backend:tx-states-outside"},
		target{"Tx/Commit", "backend:tx-loses-states"},
		target{"Tx/Rollback", "backend:tx-states-outside"},
		target{"Tx/Workflows", "broker:tx-publishes-outside"},
		target{"Tx/Workflows", "backend:tx-states-outside"},
	)
}

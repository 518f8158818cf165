// Package conformance is errand's driver test kit: one suite that proves
// every broker and result backend keeps the same promises. Every errand
// driver runs it; third-party driver authors import it. What the kit does not
// check, errand does not promise.
//
// # Wiring a driver
//
// A harness is a struct of func and value fields, so new fields never break
// an existing harness:
//
//	func TestMyBroker(t *testing.T) {
//		conformance.RunBroker(t, conformance.BrokerHarness{
//			New: func(t testing.TB) core.Broker {
//				b := mybroker.New(client, nil)
//				t.Cleanup(func() { b.Close() })
//				return b
//			},
//			Caps: conformance.BrokerCaps{OrderedByETA: true, Purge: true},
//		})
//	}
//
// [RunBroker], [RunBackend] and [RunWorker] (end to end through the core's
// worker loop) run subtests with stable names — Broker/Delay/NeverEarly,
// Backend/Chord/ClaimOnce, Worker/Retry/Fibonacci — so -run and -skip select
// them. There is no skip list: a case that does not apply to a declared
// capability checks the declaration instead (for example that an undeclared
// ability reports errors.ErrUnsupported).
//
// # Capabilities
//
// Declared capabilities are checked against the optional interfaces the
// driver implements, both ways: declaring Purge without implementing
// core.Purger fails, and so does implementing it without declaring it.
//
// # Timing
//
// Every wait is a deadline on an event or a poll, never a fixed sleep, and is
// multiplied by ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1). A watchdog per
// case stops the test binary with the case's name if a call never returns.
// Every queue, task and group a run creates carries a per-run ID, so cases on
// a shared server never see each other's leftovers.
//
// # The kit tests itself
//
// The package's own tests run every case against a deliberately broken
// variant of the memory drivers (one that loses a crashed consumer's
// messages, delivers early, double-counts a group member, lets every chord
// claimer win, ...) and require the case to fail.
package conformance

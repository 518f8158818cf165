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
//			New: func(t testing.TB) errand.Broker {
//				b := mybroker.New(client, nil)
//				t.Cleanup(func() { b.Close() })
//				return b
//			},
//			Caps: conformance.BrokerCaps{OrderedByETA: true, Purge: true},
//		})
//	}
//
// [RunBroker], [RunBackend] and [RunWorker] (end to end through errand's
// worker loop) run subtests with stable names — Broker/Delay/NeverEarly,
// Backend/Chord/ClaimOnce, Worker/Retry/Fibonacci — so -run and -skip select
// them. There is no skip list: a case that does not apply to a declared
// capability checks the declaration instead (for example that an undeclared
// capability reports errors.ErrUnsupported).
//
// # Capabilities
//
// Declared capabilities are checked against the optional interfaces the
// driver implements, both ways: declaring Purge without implementing
// driver.Purger fails, and so does implementing it without declaring it.
// RunWorker checks the declarations of the pair it is given as well
// (Worker/Capabilities): a pair run only end to end is checked too.
// What a driver promises across a server restart (BrokerCaps.Durable,
// BackendCaps.Durable, BackendCaps.Lossy) is checked by the restart
// scenario below, not just declared.
//
// # Fault scenarios
//
// [RunWorkerKilled] and [RunServerRestart] run what every driver with a
// server used to hand-write, with real processes:
//
//   - Fault/WorkerKilled: the test binary re-runs itself as worker
//     processes (no TestMain needed); one is killed with SIGKILL while its
//     tasks run, and a second must complete every task (at-least-once).
//   - Fault/ServerRestart: a chord and plain tasks are in flight when the
//     driver's own server process is stopped and started again; a Durable
//     driver loses nothing, a Lossy backend tells every waiter (a result or
//     an error), never leaves one hanging.
//
// [StartServerProcess] and [FreeAddr] run the private server a restart
// needs, so a driver wires the scenario with a command line and a ping.
//
// [RunShutdownSilentServer] and [RunSilentServer] put a [Proxy] between the
// driver and its server and stall it (a server that accepts but never
// answers): a worker's Shutdown must keep its deadline while tasks run or
// their acks hang, and every driver call, and opening a driver by URL, must
// return an error by its ctx deadline, or within the driver's per-call
// timeout without one.
//
// # Timing
//
// Every wait is a deadline on an event or a poll, never a fixed sleep, and is
// multiplied by ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1). A watchdog per
// case stops the test binary with the case's name if a call never returns.
// Every queue, task and group a run creates carries a per-run ID, so cases on
// a shared server never see each other's leftovers.
//
// Cases are independent and run in parallel (t.Parallel, bounded by go
// test's -parallel), except those asserting how late something may be (a
// delay's lateness, a prompt return, a lease extended in time), which run
// alone, first. A harness whose server cannot take the load sets Serial.
//
// # The kit tests itself
//
// The package's own tests run every case against a deliberately broken
// variant of the memory drivers (one that loses a crashed consumer's
// messages, delivers early, double-counts a group member, lets every chord
// claimer win, ...) and require the case to fail. The fault scenarios are
// tested the same way over in-memory stand-ins for processes and servers (a
// broker losing what a killed worker took, a Durable driver whose restart
// empties it, a Lossy backend whose lost chord leaves its waiter hanging).
package conformance

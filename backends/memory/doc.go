// Package memorybackend is errand's in-process result backend: the embedded
// default, with no server and no dependencies.
//
// # URL form
//
//	memory://                         a new, private backend
//	memory://NAME                     the backend named NAME in this process
//	memory://NAME?result_expiry=1h    results expire an hour after their last write
//
// Import the package (github.com/errand-go/errand/backends/memory) for its
// side effect to register the scheme with errand.OpenBackend; New makes a
// private backend without a URL.
//
// # Guarantees
//
// Every workflow primitive runs under one mutex, so group completion is
// atomic and idempotent per task and chord claims are compare-and-set.
// Results expire Options.ResultExpiry after their last write (checked on
// every read; expired entries are swept as writes go on). Group metadata
// expires GroupExpiry after the group's last activity, and never sooner
// than ResultExpiry. Waiting for a result is woken by the write itself
// ([driver.StateWaiter]), not by polling. Beginning an attempt
// ([driver.Starter]) and recording PENDING only where a task has no state
// ([driver.PendingWriter]) each check and write under that mutex too.
// So does a cancel ([driver.Canceller], [Backend.Cancel]): CANCELLED is
// written only over a state that is not terminal, and no later write but
// a PENDING replaces it (SetStates answers driver.ErrCancelled instead).
//
// The backend declares its store of states as its location
// ([Backend.Location], [driver.Located]), a value of an internal type of
// errand's that only its memory broker understands: the two are then
// co-located ([driver.Colocator]), and errand sends, starts and settles
// each task in one call of the broker.
//
// Inside a transaction of the memory drivers (a memorybroker.Tx in a
// send's ctx; [driver.Transactor], [Backend.CheckTx]) the backend keeps
// the send's states and groups in the transaction until its Commit.
//
// Nothing survives the process.
package memorybackend

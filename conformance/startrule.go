package conformance

import (
	"strconv"
	"time"

	"github.com/errand-go/errand/driver"
)

// The start rule — may this delivery begin its attempt, given the task's
// recorded state — is written once, in Go: driver.StartRequest.Allows.
// A driver that writes it again in its server's language (a Redis script,
// a SQL statement) checks its copy against that one definition with
// StartCases: every row run through its copy must answer as Allows does.
// errand's Redis backend (its Start script) and its Redis broker (the
// begin of its co-located fetch) both run these rows, and the kit's
// Backend/Start and Worker/Colocation/Start cases run a table of their own
// whose answers a self-test checks against Allows too.

// StartCase is one input of the start rule: the task's state before (nil:
// none) and the delivery about to begin (its task name, its attempt,
// whether it is the message's first delivery).
type StartCase struct {
	Name          string
	Prev          *driver.TaskState // TaskUUID and CreatedAt are the caller's to set
	Task          string
	Attempt       int
	FirstDelivery bool
}

// StartCaseTask is the task name of every StartCase: a ':' inside, and
// characters Lua patterns and SQL LIKE treat specially.
const StartCaseTask = "ns:a.b-c%d+[x]_"

// Request returns the case's request for task id: RECEIVED then STARTED,
// created and started at at.
func (c StartCase) Request(id string, at time.Time) driver.StartRequest {
	rec := &driver.TaskState{TaskUUID: id, TaskName: c.Task, State: driver.StateReceived, Attempt: c.Attempt, CreatedAt: at}
	started := *rec
	started.State, started.StartedAt = driver.StateStarted, at
	return driver.StartRequest{Received: rec, Started: &started, FirstDelivery: c.FirstDelivery}
}

// Want is the rule's answer for the case: driver.StartRequest.Allows.
func (c StartCase) Want() bool {
	return c.Request("", time.Time{}).Allows(c.Prev)
}

// StartCases returns every combination the rule distinguishes, and the
// traps of a copy that parses stored states: no state; each state errand
// records and one it does not know; a previous attempt before, equal to,
// after the delivery's, or none; the task's own name, none, another task's
// whose name is a prefix of it, one it is a prefix of, and one that JSON
// escapes; an error text that looks like JSON fields; on a first delivery
// and on a redelivery.
func StartCases() []StartCase {
	const attempt = 2
	var out []StartCase
	for _, first := range []bool{true, false} {
		out = append(out, StartCase{Name: startCaseName("none", "", 0, first), Task: StartCaseTask, Attempt: attempt, FirstDelivery: first})
	}
	states := []driver.State{driver.StatePending, driver.StateReceived, driver.StateStarted, driver.StateRetry, driver.StateSuccess, driver.StateFailure, driver.StateCancelled, "PAUSED_X"}
	names := map[string]string{"same": StartCaseTask, "unnamed": "", "other": "ns:a", "longer": StartCaseTask + "x", "escaped": "<" + StartCaseTask}
	for _, st := range states {
		for _, prevAttempt := range []int{attempt - 1, attempt, attempt + 1, 0} {
			for _, label := range []string{"same", "unnamed", "other", "longer", "escaped"} {
				for _, first := range []bool{true, false} {
					prev := &driver.TaskState{TaskName: names[label], State: st, Attempt: prevAttempt}
					if st == driver.StateRetry || st == driver.StateFailure || st == driver.StateCancelled {
						prev.Error = `boom {"created_at":"x","attempt":9,"state":"PENDING"} [1]`
					}
					out = append(out, StartCase{Name: startCaseName(string(st), label, prevAttempt, first), Prev: prev, Task: StartCaseTask, Attempt: attempt, FirstDelivery: first})
				}
			}
		}
	}
	return out
}

func startCaseName(state, label string, prevAttempt int, first bool) string {
	s := state
	if label != "" {
		s += "/" + label + "/attempt" + strconv.Itoa(prevAttempt)
	}
	if first {
		return s + "/first"
	}
	return s + "/redelivery"
}

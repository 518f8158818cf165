package driver

import (
	"encoding/json"
	"fmt"
	"time"
)

// State is where a task is in its life. A task starts in PENDING; every
// change a worker records is an edge of this graph:
//
//	PENDING  -> RECEIVED | FAILURE | CANCELLED
//	RECEIVED -> RECEIVED | STARTED | FAILURE | CANCELLED
//	STARTED  -> RECEIVED | SUCCESS | FAILURE | RETRY | CANCELLED
//	RETRY    -> RECEIVED | CANCELLED
//	FAILURE  -> PENDING
//
// RECEIVED -> RECEIVED and STARTED -> RECEIVED are redeliveries: a worker
// died or shut down before finishing and another took the task again.
// PENDING -> FAILURE and RECEIVED -> FAILURE are tasks that could not run
// (unknown name, bad arguments, a chord whose member failed). SUCCESS,
// FAILURE and CANCELLED are terminal for the worker; FAILURE -> PENDING is
// an operator requeueing an archived task as a fresh attempt. CANCELLED is
// written by whoever cancels the task (errand's Server.Cancel, through
// [Canceller] where the backend has it), never by a worker's attempt, and
// nothing follows it. A STARTED written again with Progress set
// (errand.SetProgress) is the same state, not an edge. A PENDING written beside
// the publish ([PendingWriter]) is dropped when a worker recorded the task
// first: the backend then never holds it, though the task was sent first.
type State string

// The task states, with machinery's and Celery's names.
const (
	StatePending  State = "PENDING"  // sent, not yet taken by a worker
	StateReceived State = "RECEIVED" // taken by a worker (again, after a redelivery or retry)
	StateStarted  State = "STARTED"  // its function is running
	StateRetry    State = "RETRY"    // failed; a later attempt is scheduled
	StateSuccess  State = "SUCCESS"  // finished with results (terminal)
	StateFailure  State = "FAILURE"  // failed for good (terminal)
	// StateCancelled: cancelled before or while it ran (terminal); its
	// Error says by whom or why, when the canceller said.
	StateCancelled State = "CANCELLED"
)

// transitions is the graph of allowed state changes (see [State]).
var transitions = map[State][]State{
	StatePending:   {StateReceived, StateFailure, StateCancelled},
	StateReceived:  {StateReceived, StateStarted, StateFailure, StateCancelled},
	StateStarted:   {StateReceived, StateSuccess, StateFailure, StateRetry, StateCancelled},
	StateRetry:     {StateReceived, StateCancelled},
	StateSuccess:   nil,
	StateFailure:   {StatePending},
	StateCancelled: nil,
}

// CanTransition reports whether from -> to is an edge of the state graph
// (see [State]).
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// ValidPath checks that states, in order, start at PENDING and follow
// the state graph (see [State]). It returns an error naming the first bad step.
func ValidPath(states []State) error {
	if len(states) == 0 {
		return nil
	}
	if states[0] != StatePending {
		return fmt.Errorf("first state is %s, want %s", states[0], StatePending)
	}
	for i := 1; i < len(states); i++ {
		if !CanTransition(states[i-1], states[i]) {
			return fmt.Errorf("step %d: %s -> %s is not an allowed transition", i, states[i-1], states[i])
		}
	}
	return nil
}

// Terminal reports whether s is SUCCESS, FAILURE or CANCELLED.
func (s State) Terminal() bool {
	return s == StateSuccess || s == StateFailure || s == StateCancelled
}

// Result is one value a task returned. Type is the Go type name; Value is
// its JSON encoding.
type Result struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// Decode unmarshals the result into the value dst points to.
func (r Result) Decode(dst any) error {
	if err := json.Unmarshal(r.Value, dst); err != nil {
		return fmt.Errorf("errand: decode %s result: %w", r.Type, err)
	}
	return nil
}

// TaskState is what a backend stores for one task.
type TaskState struct {
	TaskUUID string   `json:"task_uuid"`
	TaskName string   `json:"task_name"`
	State    State    `json:"state"`
	Attempt  int      `json:"attempt,omitempty"`
	Results  []Result `json:"results,omitempty"`
	Error    string   `json:"error,omitempty"`
	// ErrorKind and ErrorDetail describe a FAILURE so the producer can
	// test it with errors.Is and errors.As (errand's TaskError): the kind
	// is a short name ("unknown_task", "bad_arguments", "panic",
	// "permanent", "timeout", "retries_exhausted", "failed"), the detail a
	// small JSON object written and read by errand only. Backends store
	// both as they store Error; empty for older records.
	ErrorKind   string    `json:"error_kind,omitempty"`
	ErrorDetail string    `json:"error_detail,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// StartedAt is set when the task's function starts, FinishedAt when it
	// reaches SUCCESS, FAILURE or CANCELLED; zero otherwise.
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Progress is the last value the running task reported
	// (errand.SetProgress): a small JSON value (errand bounds its size),
	// kept with the state that follows it. Backends store and return it
	// byte for byte; empty when the task reported none.
	Progress json.RawMessage `json:"progress,omitempty"`
}

// Copy returns a copy of st that shares nothing with it.
func (st *TaskState) Copy() *TaskState {
	if st == nil {
		return nil
	}
	c := *st
	if st.Progress != nil {
		c.Progress = append(json.RawMessage(nil), st.Progress...)
	}
	if st.Results != nil {
		c.Results = make([]Result, len(st.Results))
		for i, r := range st.Results {
			c.Results[i] = Result{Type: r.Type, Value: append(json.RawMessage(nil), r.Value...)}
		}
	}
	return &c
}

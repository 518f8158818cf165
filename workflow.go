package errand

import (
	"errors"

	"github.com/errand-go/errand/internal/uuid"
)

// Group is a set of tasks that run in parallel.
type Group struct {
	GroupUUID string
	Tasks     []*Signature
}

// NewGroup returns a group of tasks with a fresh group UUID; each task is
// stamped with the group's UUID and size.
func NewGroup(tasks ...*Signature) (*Group, error) {
	if len(tasks) == 0 {
		return nil, errors.New("errand: NewGroup: no tasks")
	}
	g := &Group{GroupUUID: uuid.New(), Tasks: tasks}
	for _, t := range tasks {
		if t.UUID == "" {
			t.UUID = uuid.New()
		}
		t.GroupUUID = g.GroupUUID
		t.GroupTaskCount = len(tasks)
	}
	return g, nil
}

// Chord is a group plus a callback that runs once, after every member has
// succeeded. Unless the callback is Immutable, its arguments are its own
// Args followed by each member's results, member by member in group order
// (a member returning two values contributes two arguments). When a member
// fails for good the callback never runs: it is marked FAILURE and its
// OnError callbacks are sent with an error naming the failed member.
type Chord struct {
	Group    *Group
	Callback *Signature
}

// NewChord returns a chord of group and callback.
func NewChord(group *Group, callback *Signature) (*Chord, error) {
	if group == nil || callback == nil {
		return nil, errors.New("errand: NewChord: group and callback are required")
	}
	if callback.UUID == "" {
		callback.UUID = uuid.New()
	}
	return &Chord{Group: group, Callback: callback}, nil
}

// Chain is a sequence of tasks, each sent when the previous one succeeds.
// Unless a task is Immutable, its arguments are its own Args followed by the
// previous task's results (machinery's order). When a task fails for good
// the rest of the chain never runs.
type Chain struct {
	Tasks []*Signature
}

// NewChain links tasks through OnSuccess, each to the next.
func NewChain(tasks ...*Signature) (*Chain, error) {
	if len(tasks) == 0 {
		return nil, errors.New("errand: NewChain: no tasks")
	}
	for _, t := range tasks {
		if t.UUID == "" {
			t.UUID = uuid.New()
		}
	}
	for i := len(tasks) - 2; i >= 0; i-- {
		tasks[i].OnSuccess = append(tasks[i].OnSuccess, tasks[i+1])
	}
	return &Chain{Tasks: tasks}, nil
}

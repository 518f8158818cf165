package main

import (
	"fmt"

	"github.com/errand-go/errand"
)

// errand cancel ID...: errand.Server.Cancel for each ID, a task's UUID or
// a chord's or a recorded group's (errand.RecordGroup; Backend.GroupStates names its members). What it did is said per task: cancelled before it started
// (queued, scheduled, retrying), cancelled while it ran, or already
// finished (nothing changed). An ID the backend has no state for is an
// error (exit 1), as errand show says of an unknown task; a task already
// finished is not (exit 0).

// cancelJSON is the outcome of one ID in JSON.
type cancelJSON struct {
	ID      string           `json:"id"`
	Group   bool             `json:"group"`
	Outcome string           `json:"outcome"`
	Tasks   []taskCancelJSON `json:"tasks"`
}

// taskCancelJSON is the outcome of one task of an ID in JSON.
type taskCancelJSON struct {
	UUID    string `json:"uuid"`
	Name    string `json:"name,omitempty"`
	Outcome string `json:"outcome"`
	Prev    string `json:"prev,omitempty"` // the state before, "" when unknown
}

func cancelView(id string, rep errand.CancelReport) cancelJSON {
	v := cancelJSON{ID: id, Group: rep.Group, Outcome: string(rep.Outcome), Tasks: []taskCancelJSON{}}
	for _, tc := range rep.Tasks {
		v.Tasks = append(v.Tasks, taskCancelJSON{UUID: tc.UUID, Name: tc.Name, Outcome: string(tc.Outcome), Prev: string(tc.Prev)})
	}
	return v
}

func runCancel(c *cli, args []string) error {
	ids, err := c.parse(args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usageErrorf("want one or more task or group IDs")
	}
	srv, err := c.server()
	if err != nil {
		return err
	}
	out := make([]cancelJSON, 0, len(ids))
	var errs []error
	for _, id := range ids {
		rep, err := srv.Cancel(c.ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("task or group %q: %w", id, err))
			continue
		}
		if rep.Outcome == errand.CancelUnknown {
			errs = append(errs, tagged(errand.ErrTaskNotFound, "task or group %q not found: the backend has no state for it (a wrong ID, or its record expired); nothing cancelled", id))
		}
		out = append(out, cancelView(id, rep))
		if !c.json() {
			c.printCancel(id, rep)
		}
	}
	if c.json() {
		if err := c.printJSON(out); err != nil {
			return err
		}
	}
	return c.someFailed(errs, len(ids), "IDs not cancelled")
}

// printCancel says what cancelling id did: one line per task, after a
// line counting them for a group. An unknown ID prints nothing (its error
// says it).
func (c *cli) printCancel(id string, rep errand.CancelReport) {
	if rep.Outcome == errand.CancelUnknown {
		return
	}
	if rep.Group {
		n := 0
		for _, tc := range rep.Tasks {
			if tc.Outcome == errand.CancelQueued || tc.Outcome == errand.CancelRunning {
				n++
			}
		}
		fmt.Fprintf(c.stdout, "group %s: cancelled %d of its %d tasks\n", id, n, len(rep.Tasks))
	}
	for _, tc := range rep.Tasks {
		fmt.Fprintln(c.stdout, cancelText(tc))
	}
}

// cancelText says on one line what Cancel did to one task.
func cancelText(tc errand.TaskCancel) string {
	task := tc.UUID
	if tc.Name != "" {
		task += " (" + tc.Name + ")"
	}
	switch tc.Outcome {
	case errand.CancelQueued:
		return fmt.Sprintf("cancelled %s: it was %s and never starts", task, tc.Prev)
	case errand.CancelRunning:
		return fmt.Sprintf("cancelled %s: it was %s; its worker cancels its ctx and records nothing more", task, tc.Prev)
	case errand.CancelFinished:
		return fmt.Sprintf("%s was already %s: nothing changed", task, tc.Prev)
	}
	return fmt.Sprintf("%s: not found, nothing changed", task)
}

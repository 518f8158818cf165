package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// errand show and ls show the progress a task last reported
// (errand.SetProgress), as the backend stores it.
func TestShowProgress(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		id := d.send("add", time.Hour, 1, 2)
		st, err := d.srv.Backend().GetState(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		st.State, st.StartedAt = errand.StateStarted, time.Now()
		st.Progress = json.RawMessage(`{"done": 3, "of": 10}`)
		if errs := d.srv.Backend().SetStates(context.Background(), []*errand.TaskState{st}); errs != nil && errs[0] != nil {
			t.Fatal(errs[0])
		}
		r := d.ok("show", id, "-q", d.queue)
		if got := row(r.stdout, "progress"); len(got) != 2 || got[1] != `{"done":3,"of":10}` {
			t.Errorf("show of a task that reported progress: want the line 'progress {\"done\":3,\"of\":10}', got:\n%s", r)
		}
		r = d.ok("ls", "scheduled", "-q", d.queue)
		if h := row(r.stdout, "ID"); len(h) < 6 || h[4] != "STATE" || h[5] != "PROGRESS" {
			t.Errorf("ls of a page with progress: want a PROGRESS column after STATE, got:\n%s", r)
		}
		if got := row(r.stdout, id); !slices.Equal(after(got, "STARTED", 2), []string{"STARTED", `{"done":3,"of":10}`}) {
			t.Errorf("ls: want %s STARTED with its progress, got %q in:\n%s", id, got, r.stdout)
		}
		var ti taskJSON
		d.json(&ti, "show", id, "-q", d.queue)
		if ti.State == nil || !jsonEqual(ti.State.Progress, `{"done":3,"of":10}`) {
			t.Errorf("show -o json: want state.progress {\"done\":3,\"of\":10}, got %+v", ti.State)
		}
		// A page without progress has no such column.
		d.send("add", 0, 1, 1)
		if h := row(d.ok("ls", "pending", "-q", d.queue).stdout, "ID"); strings.Contains(strings.Join(h, " "), "PROGRESS") {
			t.Errorf("ls of a page without progress: want no PROGRESS column, got %q", h)
		}
	})
}

// after returns the n fields of fs from the first that is first on; nil
// when there are fewer.
func after(fs []string, first string, n int) []string {
	i := slices.Index(fs, first)
	if i < 0 || i+n > len(fs) {
		return nil
	}
	return fs[i : i+n]
}

// jsonEqual reports whether raw is the JSON value want.
func jsonEqual(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

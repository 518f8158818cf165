package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// errand cancel, over every deployment: a task not started is recorded
// CANCELLED and says so; cancelling it again changes nothing (exit 0); a
// chord's group's tasks are cancelled together; an unknown ID exits 1 with one
// line saying so.
func TestCancel(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		later := d.send("add", time.Hour, 1, 2)
		r := d.ok("cancel", later)
		if want := fmt.Sprintf("cancelled %s (add): it was PENDING and never starts", later); strings.TrimSpace(r.stdout) != want {
			t.Errorf("cancel of a scheduled task: want the line %q, got:\n%s", want, r)
		}
		if st := d.state(later, errand.StateCancelled); st.FinishedAt.IsZero() {
			t.Errorf("a cancelled task's state must say when it was cancelled (FinishedAt), got %+v", st)
		}
		// show and ls say CANCELLED; show adds what becomes of the message
		// its list still holds.
		r = d.ok("show", later, "-q", d.queue)
		if got := row(r.stdout, "state"); len(got) < 2 || got[1] != "CANCELLED" || !strings.Contains(r.stdout, "acks it without running it") {
			t.Errorf("show of a cancelled scheduled task: want 'state CANCELLED (a worker that takes its message acks it without running it)', got:\n%s", r)
		}
		if got := row(d.ok("ls", "scheduled", "-q", d.queue).stdout, later); !slices.Contains(got, "CANCELLED") {
			t.Errorf("ls scheduled: want STATE CANCELLED for %s, got %q", later, got)
		}

		// Again: already finished, nothing changed, and that is no failure.
		r = d.ok("cancel", later)
		if want := fmt.Sprintf("%s (add) was already CANCELLED: nothing changed", later); strings.TrimSpace(r.stdout) != want {
			t.Errorf("cancel of a cancelled task: want %q, got:\n%s", want, r)
		}
		var out []cancelJSON
		d.json(&out, "cancel", later)
		if len(out) != 1 || out[0].ID != later || out[0].Group || out[0].Outcome != "finished" ||
			len(out[0].Tasks) != 1 || out[0].Tasks[0] != (taskCancelJSON{UUID: later, Name: "add", Outcome: "finished", Prev: "CANCELLED"}) {
			t.Errorf("cancel -o json of a cancelled task: want one finished outcome, prev CANCELLED, got %+v", out)
		}

		// A chord's group: one member cancelled first, then the group by
		// its ID. (A plain group's ID is unknown to Cancel: SendGroup
		// records no group.)
		a, b, cb := errand.NewSignature("add", 3, 4), errand.NewSignature("add", 5, 6), errand.NewSignature("sum")
		eta := time.Now().Add(time.Hour)
		for _, s := range []*errand.Signature{a, b, cb} {
			s.RoutingKey, s.ETA = d.queue, &eta
		}
		g, err := errand.NewGroup(a, b)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := errand.NewChord(g, cb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.srv.SendChord(context.Background(), ch); err != nil {
			t.Fatal(err)
		}
		d.ok("cancel", a.UUID)
		r = d.ok("cancel", g.GroupUUID)
		for _, want := range []string{
			fmt.Sprintf("group %s: cancelled 1 of its 2 tasks", g.GroupUUID),
			fmt.Sprintf("%s (add) was already CANCELLED: nothing changed", a.UUID),
			fmt.Sprintf("cancelled %s (add): it was PENDING and never starts", b.UUID),
		} {
			if !strings.Contains(r.stdout, want+"\n") {
				t.Errorf("cancel of a group: want the line %q, got:\n%s", want, r)
			}
		}
		d.state(b.UUID, errand.StateCancelled)
		d.json(&out, "cancel", g.GroupUUID)
		if len(out) != 1 || !out[0].Group || out[0].Outcome != "finished" || len(out[0].Tasks) != 2 ||
			out[0].Tasks[0].UUID != a.UUID || out[0].Tasks[1].UUID != b.UUID {
			t.Errorf("cancel -o json of a cancelled group: want group true, outcome finished, its 2 tasks in group order, got %+v", out)
		}

		// Unknown: exit 1, one line; the JSON still says unknown.
		d.fails(1, []string{`task or group "no-such-id" not found`, "nothing cancelled"}, "cancel", "no-such-id")
		r = d.run("cancel", "no-such-id", "-o", "json")
		out = nil
		if r.code != exitFailed || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out) != 1 || out[0].Outcome != "unknown" ||
			len(out[0].Tasks) != 1 || out[0].Tasks[0] != (taskCancelJSON{UUID: "no-such-id", Outcome: "unknown"}) {
			t.Errorf("cancel -o json of an unknown ID: want exit 1 and [{outcome unknown, tasks [{no-such-id unknown}]}], got:\n%s", r)
		}
		// Several IDs: each known one is done, each unknown one named on a
		// line of its own.
		other := d.send("add", time.Hour, 7, 8)
		r = d.run("cancel", "no-such-id", other, "nor-this")
		if r.code != exitFailed || !strings.HasPrefix(r.stdout, "cancelled "+other) ||
			r.stderr != `errand cancel: task or group "no-such-id" not found: the backend has no state for it (a wrong ID, or its record expired); nothing cancelled
errand cancel: task or group "nor-this" not found: the backend has no state for it (a wrong ID, or its record expired); nothing cancelled
errand cancel: 2 of 3 IDs not cancelled
` {
			t.Errorf("cancel of an unknown, a known and an unknown ID: want exit 1, the known one cancelled, a line for each unknown one, got:\n%s", r)
		}
		d.state(other, errand.StateCancelled)
		d.fails(2, []string{"want one or more task or group IDs"}, "cancel")
	})
}

// errand cancel of a running task, over every deployment: show prints the
// progress it reported (errand.SetProgress); cancel says the task was
// running, the handler's ctx ends with the cause ErrCancelled (from
// the broker's notice, or at the next lease extension, every 50ms here),
// and what the handler returns then is discarded: the state stays
// CANCELLED once the worker let the task go.
func TestCancelRunning(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		started := make(chan struct{}, 1)
		cause := make(chan error, 1)
		release := make(chan struct{})
		if err := d.srv.Register("block", func(ctx context.Context) (string, error) {
			if err := errand.SetProgress(ctx, map[string]int{"done": 1, "of": 3}); err != nil {
				return "", err
			}
			started <- struct{}{}
			select {
			case <-ctx.Done():
				cause <- context.Cause(ctx)
			case <-release:
			}
			return "finished anyway", nil
		}); err != nil {
			t.Fatal(err)
		}
		w := d.srv.NewWorker(errand.WorkerConfig{
			Queues: map[string]int{d.queue: 1}, Concurrency: 2, Lease: 2 * time.Second, ExtendEvery: 50 * time.Millisecond,
		})
		w.Start()
		t.Cleanup(func() {
			close(release)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			w.Shutdown(ctx)
		})
		id := d.send("block", 0)
		select {
		case <-started:
		case <-time.After(scaled(20 * time.Second)):
			t.Fatal("the task block did not start within 20s")
		}
		// Its progress, written by errand.SetProgress, shows in show.
		eventually(t, "errand show to print the running task's progress", func() bool {
			got := row(d.ok("show", id, "-q", d.queue).stdout, "progress")
			return len(got) == 2 && got[1] == `{"done":1,"of":3}`
		})
		r := d.ok("cancel", id)
		if want := fmt.Sprintf("cancelled %s (block): it was STARTED; its worker cancels its ctx and records nothing more", id); strings.TrimSpace(r.stdout) != want {
			t.Errorf("cancel of a running task: want the line %q, got:\n%s", want, r)
		}
		select {
		case err := <-cause:
			if !errors.Is(err, errand.ErrCancelled) {
				t.Errorf("the cancelled task's ctx ended with the cause %v, want ErrCancelled", err)
			}
		case <-time.After(scaled(20 * time.Second)):
			t.Fatal("the running task's ctx was not cancelled within 20s of errand cancel (its worker extends its lease every 50ms, and reads its state at each)")
		}
		eventually(t, "the worker to let the cancelled task go", func() bool {
			return !slices.Contains(d.list(errand.ListInFlight), id)
		})
		if st := d.state(id, errand.StateCancelled); len(st.Results) != 0 {
			t.Errorf("a cancelled task's late result must be discarded, got %+v", st.Results)
		}
	})
}

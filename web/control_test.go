package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/web"
)

// The task page and the queue's lists show the progress a task last
// reported (errand.SetProgress), as the backend stores it; the page keeps
// reloading while the task runs.
func TestProgressShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	ctx := context.Background()
	st, err := f.srv.Backend().GetState(ctx, f.schedule)
	if err != nil {
		t.Fatal(err)
	}
	st.State, st.StartedAt = errand.StateStarted, time.Now()
	st.Progress = json.RawMessage(`{"done":3,"of":10}`)
	if errs := f.srv.Backend().SetStates(ctx, []*errand.TaskState{st}); errs != nil && errs[0] != nil {
		t.Fatal(errs[0])
	}
	_, body := f.get(t, "/queues/"+queue+"/tasks/"+f.schedule)
	for _, want := range []string{`<dt>Progress</dt>`, `<pre id="progress">{
  &#34;done&#34;: 3,
  &#34;of&#34;: 10
}</pre>`, `data-refresh="2"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page of a running task that reported progress lacks %q:\n%s", want, body)
		}
	}
	_, body = f.get(t, "/queues/"+queue+"/scheduled")
	if !strings.Contains(body, `data-progress title="{&#34;done&#34;:3,&#34;of&#34;:10}">{&#34;done&#34;:3,&#34;of&#34;:10}</span>`) {
		t.Errorf("the scheduled list does not show the task's progress beside its state:\n%s", body)
	}
	_, body = f.get(t, "/queues/"+queue+"/tasks/"+f.done[0])
	if strings.Contains(body, `id="progress"`) {
		t.Errorf("the page of a task that reported no progress shows some:\n%s", body)
	}
}

// Cancel on the dashboard: from a task's page, from a list's row and from
// the workers page (a running task), each a POST with the dashboard's
// checks, answering 303 with the outcome in the banner; a task already
// finished is said to be so and left alone; an unknown task is a 404.
func TestCancelFromTheBrowser(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	ctx := context.Background()
	page := "/queues/" + queue + "/tasks/" + f.schedule

	_, body := f.get(t, page)
	if !strings.Contains(body, `action="queues/`+queue+`/tasks/`+f.schedule+`/cancel" data-confirm="Cancel this task? It never starts."`) || !strings.Contains(body, `id="cancel"`) {
		t.Fatalf("a scheduled task's page lacks its Cancel button (a form asking for confirmation):\n%s", body)
	}
	// A read-only dashboard over the same server offers no Cancel and
	// refuses the POST; a POST from another site changes nothing.
	ro := web.New(f.srv, web.Options{ReadOnly: true})
	t.Cleanup(func() { ro.Close() })
	rots := httptest.NewServer(ro)
	t.Cleanup(rots.Close)
	for _, p := range []string{page, "/queues/" + queue + "/scheduled"} {
		if _, body := do(t, rots.Client(), "GET", rots.URL+p, nil, nil); strings.Contains(body, "/cancel") {
			t.Errorf("read-only: %s offers Cancel:\n%s", p, body)
		}
	}
	if code, _ := do(t, rots.Client(), "POST", rots.URL+page+"/cancel", nil, nil); code != http.StatusForbidden {
		t.Errorf("read-only: POST cancel answered %d, want 403", code)
	}
	if code := crossSitePost(t, f, page+"/cancel"); code != http.StatusForbidden {
		t.Errorf("a cross-site POST cancel: status %d, want 403", code)
	}
	if st, err := f.srv.Backend().GetState(ctx, f.schedule); err != nil || st.State != errand.StatePending {
		t.Fatalf("after a refused read-only and cross-site cancel the task must stay PENDING, got %+v, %v", st, err)
	}

	resp := f.post(t, page+"/cancel", nil)
	loc, _ := resp.Location()
	if resp.StatusCode != http.StatusSeeOther || loc.Path != page || loc.Query().Get("done") != "cancelled" {
		t.Fatalf("POST cancel: %d to %v, want 303 to the task's page with done=cancelled", resp.StatusCode, loc)
	}
	if st, err := f.srv.Backend().GetState(ctx, f.schedule); err != nil || st.State != errand.StateCancelled {
		t.Fatalf("after POST cancel the task's state must be CANCELLED, got %+v, %v", st, err)
	}
	_, body = f.get(t, loc.RequestURI())
	for _, want := range []string{`class="state cancelled" data-state="CANCELLED"`, "Cancelled: the task never starts", "<b>cancelled</b>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the cancelled task's page lacks %q:\n%s", want, body)
		}
	}
	for _, unwanted := range []string{`id="cancel"`, `data-refresh=`} {
		if strings.Contains(body, unwanted) {
			t.Errorf("the page of a cancelled (finished) task has %q: no Cancel, no reloading:\n%s", unwanted, body)
		}
	}
	// Again: already finished, nothing changed.
	resp = f.post(t, page+"/cancel", nil)
	loc, _ = resp.Location()
	if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("done") != "already-finished" {
		t.Errorf("POST cancel of a cancelled task: %d to %v, want 303 with done=already-finished", resp.StatusCode, loc)
	}
	if _, body = f.get(t, loc.RequestURI()); !strings.Contains(body, "Nothing to cancel: the task had already finished") {
		t.Errorf("after cancelling a finished task the banner must say nothing changed:\n%s", body)
	}
	if resp = f.post(t, "/queues/"+queue+"/tasks/no-such-task/cancel", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST cancel of an unknown task: status %d, want 404", resp.StatusCode)
	}
	// The action is a task's: a chord's group ID in its place is no task,
	// and its members are left alone.
	eta := time.Now().Add(time.Hour)
	m1, m2, cb := errand.NewSignature("add", 1, 2), errand.NewSignature("add", 3, 4), errand.NewSignature("add", 0)
	for _, s := range []*errand.Signature{m1, m2, cb} {
		s.ETA = &eta
	}
	g, _ := errand.NewGroup(m1, m2)
	ch, _ := errand.NewChord(g, cb)
	if _, err := f.srv.SendChord(ctx, ch); err != nil {
		t.Fatal(err)
	}
	if resp = f.post(t, "/queues/"+queue+"/tasks/"+g.GroupUUID+"/cancel", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST cancel of a chord's group ID on a task's action: status %d, want 404 (no task has that ID)", resp.StatusCode)
	}
	if st, err := f.srv.Backend().GetState(ctx, m1.UUID); err != nil || st.State != errand.StatePending {
		t.Errorf("a task's Cancel given a group's ID must leave its members alone; member 1: %+v, %v", st, err)
	}

	// From the scheduled list: back to the list.
	later := errand.NewSignature("add", 1, 1)
	later.ETA = &eta
	if _, err := f.srv.SendTask(ctx, later); err != nil {
		t.Fatal(err)
	}
	_, body = f.get(t, "/queues/"+queue+"/scheduled")
	if !strings.Contains(body, `action="queues/`+queue+`/tasks/`+later.UUID+`/cancel" data-confirm="Cancel task `+later.UUID+`?"><input type="hidden" name="back" value="scheduled">`) {
		t.Errorf("the scheduled list lacks the Cancel button of %s:\n%s", later.UUID, body)
	}
	if !strings.Contains(body, `data-task="`+f.schedule+`"`) || strings.Contains(body, `tasks/`+f.schedule+`/cancel"`) {
		t.Errorf("the scheduled list must not offer Cancel for %s, which is CANCELLED:\n%s", f.schedule, body)
	}
	resp = f.post(t, "/queues/"+queue+"/tasks/"+later.UUID+"/cancel", url.Values{"back": {"scheduled"}})
	loc, _ = resp.Location()
	if resp.StatusCode != http.StatusSeeOther || loc.Path != "/queues/"+queue+"/scheduled" || loc.Query().Get("done") != "cancelled" {
		t.Errorf("POST cancel from the scheduled list: %d to %v, want 303 to the list with done=cancelled", resp.StatusCode, loc)
	}

	// A running task, from the workers page: back to it.
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.srv.Register("block", func(ctx context.Context) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
		case <-release:
		}
		return ctx.Err()
	})
	r, err := f.srv.SendTask(ctx, errand.NewSignature("block"))
	if err != nil {
		t.Fatal(err)
	}
	running := r.Signature.UUID
	select {
	case <-started:
	case <-time.After(scaled(10 * time.Second)):
		t.Fatal("the task block did not start within 10s")
	}
	wait(t, "the workers page to list the running task", func() bool {
		_, body = f.get(t, "/workers")
		return strings.Contains(body, `data-running="`+running+`"`)
	})
	if !strings.Contains(body, `action="queues/`+queue+`/tasks/`+running+`/cancel"`) || !strings.Contains(body, `name="back" value="workers"`) {
		t.Fatalf("the workers page lacks the running task's Cancel button:\n%s", body)
	}
	_, body = f.get(t, "/queues/"+queue+"/tasks/"+running)
	if !strings.Contains(body, `data-confirm="Cancel this task? Its worker cancels it and records nothing more."`) {
		t.Errorf("a running task's page must offer Cancel saying its worker stops it:\n%s", body)
	}
	resp = f.post(t, "/queues/"+queue+"/tasks/"+running+"/cancel", url.Values{"back": {"workers"}})
	loc, _ = resp.Location()
	if resp.StatusCode != http.StatusSeeOther || loc.Path != "/workers" || loc.Query().Get("done") != "cancelled-running" {
		t.Fatalf("POST cancel from the workers page: %d to %v, want 303 to /workers with done=cancelled-running", resp.StatusCode, loc)
	}
	if _, body = f.get(t, loc.RequestURI()); !strings.Contains(body, "Cancelled: the task was running") {
		t.Errorf("the workers page after a cancel must say what happened:\n%s", body)
	}
	if st, err := f.srv.Backend().GetState(ctx, running); err != nil || st.State != errand.StateCancelled {
		t.Errorf("after POST cancel the running task's state must be CANCELLED, got %+v, %v", st, err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, errand.ErrCancelled) {
			t.Errorf("the running task cancelled from the dashboard: its ctx ended with the cause %v, want ErrCancelled", err)
		}
	case <-time.After(scaled(10 * time.Second)):
		t.Error("the running task cancelled from the dashboard: its ctx did not end within 10s")
	}
}

// crossSitePost sends a POST as a page of another site would and returns
// the status.
func crossSitePost(t *testing.T, f *fixture, path string) int {
	t.Helper()
	req, err := http.NewRequest("POST", f.ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := noRedirects(f.ts.Client()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

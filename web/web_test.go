package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/web"
)

const queue = "web_q"

// fixture is a server on the memory drivers with a worker, seeded with
// tasks in several lists, and a dashboard over it.
type fixture struct {
	srv      *errand.Server
	dash     *web.Dashboard
	ts       *httptest.Server
	done     []string // completed task IDs, oldest first
	failed   string   // the archived task's ID (runs fine when requeued)
	schedule string   // a task due in an hour
	flakyRun atomic.Int32
}

// scaled multiplies d by ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1), for
// slow machines.
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("ERRAND_CONFORMANCE_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// wait polls cond until it holds or 10s (scaled) pass.
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := scaled(10 * time.Second)
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: it did not happen", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newFixture seeds a queue: three tasks done, one archived (its function
// fails on its first run, for good), one scheduled an hour ahead.
func newFixture(t *testing.T, opts web.Options) *fixture {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil), DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv}
	srv.Register("add", func(a, b int) (int, error) { return a + b, nil })
	srv.Register("flaky", func(what string) (string, error) {
		if f.flakyRun.Add(1) == 1 {
			return "", errand.Permanent(errors.New("the first run of " + what + " always fails"))
		}
		return "ok " + what, nil
	})
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2, Heartbeat: 50 * time.Millisecond, PausePoll: 20 * time.Millisecond})
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Shutdown(ctx)
		srv.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		r, err := srv.SendTask(ctx, errand.NewSignature("add", i, 2))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		f.done = append(f.done, r.Signature.UUID)
	}
	r, err := srv.SendTask(ctx, errand.NewSignature("flaky", "job"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx); err == nil {
		t.Fatal("flaky's first run succeeded; the fixture needs it to fail")
	}
	f.failed = r.Signature.UUID
	wait(t, "the failed task in the archive", func() bool {
		_, err := srv.ArchivedTask(ctx, queue, f.failed)
		return err == nil
	})
	later := errand.NewSignature("add", 40, 2)
	eta := time.Now().Add(time.Hour)
	later.ETA = &eta
	if _, err := srv.SendTask(ctx, later); err != nil {
		t.Fatal(err)
	}
	f.schedule = later.UUID

	f.dash = web.New(srv, opts)
	t.Cleanup(func() { f.dash.Close() })
	f.ts = httptest.NewServer(f.dash)
	t.Cleanup(f.ts.Close)
	return f
}

// get fetches path from the dashboard and returns the status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return do(t, f.ts.Client(), "GET", f.ts.URL+path, nil, nil)
}

// post sends a form as the dashboard's own pages do (same origin).
func (f *fixture) post(t *testing.T, path string, form url.Values) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", f.ts.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", f.ts.URL)
	resp, err := noRedirects(f.ts.Client()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func noRedirects(c *http.Client) *http.Client {
	c2 := *c
	c2.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c2
}

func do(t *testing.T, c *http.Client, method, u string, header http.Header, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// count reads the number the page shows for data-count="name".
func count(t *testing.T, body, name string) int {
	t.Helper()
	m := regexp.MustCompile(`data-count="` + name + `"[^>]*>(\d+)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no count %q on the page:\n%s", name, body)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestOverviewShowsEveryCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	status, body := f.get(t, "/")
	if status != 200 {
		t.Fatalf("GET /: status %d, want 200:\n%s", status, body)
	}
	if !strings.Contains(body, `data-queue="`+queue+`"`) {
		t.Fatalf("the overview does not list queue %s:\n%s", queue, body)
	}
	want := map[string]int{"pending": 0, "scheduled": 1, "retrying": 0, "inflight": 0, "archived": 1, "completed": 3}
	for name, n := range want {
		if got := count(t, body, name); got != n {
			t.Errorf("overview count %s = %d, want %d (seeded: 3 done, 1 archived, 1 due in an hour)", name, got, n)
		}
	}
	if !strings.Contains(body, `data-paused="false"`) {
		t.Error("the overview does not show the queue running")
	}
	if !strings.Contains(body, "<svg") {
		t.Error("the overview has no throughput chart")
	}
}

func TestQueueListsArePaged(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{PageSize: 2})
	rows := regexp.MustCompile(`<tr data-task="([^"]+)"`)
	_, p1 := f.get(t, "/queues/"+queue+"/completed")
	_, p2 := f.get(t, "/queues/"+queue+"/completed?page=2")
	var ids []string
	for _, m := range rows.FindAllStringSubmatch(p1, -1) {
		ids = append(ids, m[1])
	}
	if len(ids) != 2 || !strings.Contains(p1, "?page=2") {
		t.Fatalf("completed page 1 of size 2 shows %v and a next link %v; want 2 tasks and a link to page 2", ids, strings.Contains(p1, "?page=2"))
	}
	for _, m := range rows.FindAllStringSubmatch(p2, -1) {
		ids = append(ids, m[1])
	}
	slices.Sort(ids)
	want := slices.Sorted(slices.Values(f.done))
	if !slices.Equal(ids, want) {
		t.Errorf("completed pages 1 and 2 list %v, want the three done tasks %v", ids, want)
	}
	if strings.Contains(p2, "?page=3") {
		t.Error("page 2 of 3 tasks links to a page 3")
	}

	_, arch := f.get(t, "/queues/"+queue+"/archived")
	if !strings.Contains(arch, `data-task="`+f.failed+`"`) || !strings.Contains(arch, "/tasks/"+f.failed+"/requeue") {
		t.Errorf("the archived list does not show the failed task with a requeue form:\n%s", arch)
	}
	if !strings.Contains(arch, "the first run of job always fails") {
		t.Error("the archived list does not show the task's last error")
	}
	_, sched := f.get(t, "/queues/"+queue+"/scheduled")
	if !strings.Contains(sched, `data-task="`+f.schedule+`"`) {
		t.Error("the scheduled list does not show the task due in an hour")
	}
}

func TestTaskPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	_, body := f.get(t, "/queues/"+queue+"/tasks/"+f.failed)
	for _, want := range []string{
		`data-state="FAILURE"`, `data-list="archived"`, "flaky", "the first run of job always fails",
		`&#34;job&#34;`, "<b>archived</b>", "<b>started</b>", "<b>sent</b>", `id="requeue"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the archived task's page lacks %q", want)
		}
	}
	_, body = f.get(t, "/queues/"+queue+"/tasks/"+f.done[1])
	for _, want := range []string{`data-state="SUCCESS"`, `id="result">3<`, "<b>finished</b>", "<b>acked</b>"} {
		if !strings.Contains(body, want) {
			t.Errorf("a done task's page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `id="requeue"`) {
		t.Error("a done task's page offers to requeue it")
	}
}

func TestRequeueFromTheBrowser(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	resp := f.post(t, "/queues/"+queue+"/tasks/"+f.failed+"/requeue", nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST requeue: status %d, want 303", resp.StatusCode)
	}
	loc, _ := resp.Location()
	if loc.Path != "/queues/"+queue+"/tasks/"+f.failed || loc.Query().Get("done") != "requeued" {
		t.Errorf("POST requeue redirects to %s, want the task's page with done=requeued", loc)
	}
	wait(t, "the requeued task to succeed", func() bool {
		st, err := f.srv.Backend().GetState(context.Background(), f.failed)
		return err == nil && st.State == errand.StateSuccess
	})
	_, body := f.get(t, loc.RequestURI())
	if !strings.Contains(body, `data-state="SUCCESS"`) || !strings.Contains(body, "Requeued") {
		t.Errorf("after the requeue the task's page does not show SUCCESS and the banner:\n%s", body)
	}
	// A second requeue: the task is no longer archived.
	resp = f.post(t, "/queues/"+queue+"/tasks/"+f.failed+"/requeue", nil)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("requeueing a task not archived: status %d, want 409", resp.StatusCode)
	}
}

func TestRequeueAllAndDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	resp := f.post(t, "/queues/"+queue+"/requeue-all", url.Values{"back": {"archived"}})
	loc, _ := resp.Location()
	if resp.StatusCode != 303 || loc.Path != "/queues/"+queue+"/archived" || loc.Query().Get("n") != "1" {
		t.Fatalf("POST requeue-all: %d to %v, want 303 to the archived list with n=1", resp.StatusCode, loc)
	}
	wait(t, "the requeued task to succeed", func() bool {
		st, err := f.srv.Backend().GetState(context.Background(), f.failed)
		return err == nil && st.State == errand.StateSuccess
	})

	// Archive two more (flaky fails only once, so these use an unknown
	// argument count: bad arguments fail for good).
	ctx := context.Background()
	var bad []string
	for range 2 {
		r, err := f.srv.SendTask(ctx, errand.NewSignature("add", 1))
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, r.Signature.UUID)
	}
	wait(t, "two archived tasks", func() bool {
		q, err := f.srv.Queue(ctx, queue)
		return err == nil && q.Archived == 2
	})
	resp = f.post(t, "/queues/"+queue+"/tasks/"+bad[0]+"/delete", nil)
	if resp.StatusCode != 303 {
		t.Fatalf("POST delete: status %d, want 303", resp.StatusCode)
	}
	if _, err := f.srv.ArchivedTask(ctx, queue, bad[0]); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("after delete the task is still archived (err %v)", err)
	}
	if resp := f.post(t, "/queues/"+queue+"/tasks/"+bad[0]+"/delete", nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("deleting it again: status %d, want 409", resp.StatusCode)
	}
	resp = f.post(t, "/queues/"+queue+"/delete-all", nil)
	loc, _ = resp.Location()
	if resp.StatusCode != 303 || loc.Query().Get("n") != "1" {
		t.Errorf("POST delete-all: %d to %v, want 303 with n=1", resp.StatusCode, loc)
	}
	_, body := f.get(t, "/")
	if n := count(t, body, "archived"); n != 0 {
		t.Errorf("after delete-all the overview shows %d archived, want 0", n)
	}
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	resp := f.post(t, "/queues/"+queue+"/pause", url.Values{"back": {"overview"}})
	loc, _ := resp.Location()
	if resp.StatusCode != 303 || loc.Path != "/" {
		t.Fatalf("POST pause: %d to %v, want 303 to the overview", resp.StatusCode, loc)
	}
	paused, err := f.srv.Paused(context.Background())
	if err != nil || !slices.Contains(paused, queue) {
		t.Fatalf("after POST pause the broker's paused queues are %v (%v), want %s", paused, err, queue)
	}
	_, body := f.get(t, loc.RequestURI())
	if !strings.Contains(body, `data-paused="true"`) || !strings.Contains(body, "Paused:") {
		t.Error("the overview does not show the queue paused, or the banner")
	}
	if !strings.Contains(body, "/resume") {
		t.Error("a paused queue has no resume form")
	}
	resp = f.post(t, "/queues/"+queue+"/resume", nil)
	if resp.StatusCode != 303 {
		t.Fatalf("POST resume: status %d", resp.StatusCode)
	}
	if paused, _ := f.srv.Paused(context.Background()); slices.Contains(paused, queue) {
		t.Error("the queue is still paused after POST resume")
	}
}

func TestErrorPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	for _, c := range []struct {
		path   string
		status int
		title  string
	}{
		{"/queues/nosuchqueue", 404, "Unknown queue"},
		{"/queues/nosuchqueue/tasks/x", 404, "Unknown queue"},
		{"/queues/" + queue + "/tasks/nosuchtask", 404, "Task not found"},
		{"/queues/" + queue + "/nosuchlist", 404, "Unknown list"},
		{"/queues/" + queue + "/pending?page=0", 400, "Bad page number"},
		{"/nosuchpage", 404, "Page not found"},
	} {
		status, body := f.get(t, c.path)
		if status != c.status || !strings.Contains(body, c.title) {
			t.Errorf("GET %s: status %d, want %d with %q:\n%s", c.path, status, c.status, c.title, body)
		}
	}
	resp := f.post(t, "/queues/"+queue+"/tasks/"+f.done[0]+"/requeue", nil)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("requeue of a done task: status %d, want 409 (not archived)", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", f.ts.URL+"/queues/"+queue+"/tasks/"+f.done[0]+"/requeue", nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, _ = f.ts.Client().Do(req)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "Task not archived") {
		t.Errorf("the page for a requeue of a task not archived does not say so:\n%s", b)
	}
	if resp := f.post(t, "/queues/nosuchqueue/pause", nil); resp.StatusCode != 404 {
		t.Errorf("pause of an unknown queue: status %d, want 404", resp.StatusCode)
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{ReadOnly: true})
	for _, p := range []string{"/", "/queues/" + queue + "/archived", "/queues/" + queue + "/tasks/" + f.failed} {
		status, body := f.get(t, p)
		if status != 200 {
			t.Fatalf("GET %s: status %d", p, status)
		}
		if strings.Contains(body, `method="post"`) {
			t.Errorf("read-only page %s shows an action form", p)
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("read-only page %s does not say it is read-only", p)
		}
	}
	for _, p := range []string{"/queues/" + queue + "/pause", "/queues/" + queue + "/tasks/" + f.failed + "/requeue", "/queues/" + queue + "/delete-all"} {
		if resp := f.post(t, p, nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("read-only POST %s: status %d, want 403", p, resp.StatusCode)
		}
	}
	if _, err := f.srv.ArchivedTask(context.Background(), queue, f.failed); err != nil {
		t.Errorf("a read-only dashboard changed the archive: %v", err)
	}
	if paused, _ := f.srv.Paused(context.Background()); len(paused) != 0 {
		t.Errorf("a read-only dashboard paused %v", paused)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{Token: "s3cret-token", Username: "ops", Password: "pa55"})
	c := f.ts.Client()
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"none", nil, 401},
		{"wrong token", http.Header{"Authorization": {"Bearer nope"}}, 401},
		{"token prefix", http.Header{"Authorization": {"Bearer s3cret"}}, 401},
		{"token", http.Header{"Authorization": {"Bearer s3cret-token"}}, 200},
		{"token, lower-case scheme", http.Header{"Authorization": {"bearer s3cret-token"}}, 200},
		{"wrong password", http.Header{"Authorization": {basic("ops", "nope")}}, 401},
		{"wrong user", http.Header{"Authorization": {basic("admin", "pa55")}}, 401},
		{"basic", http.Header{"Authorization": {basic("ops", "pa55")}}, 200},
	} {
		for _, p := range []string{"/", "/api/queues", "/assets/style.css"} {
			status, body := do(t, c, "GET", f.ts.URL+p, tc.header, nil)
			if status != tc.status {
				t.Errorf("%s: GET %s: status %d, want %d", tc.name, p, status, tc.status)
			}
			if status == 401 && strings.Contains(body, queue) {
				t.Errorf("%s: the 401 page shows the queue's name", tc.name)
			}
		}
	}
	req, _ := http.NewRequest("GET", f.ts.URL+"/", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Basic ") {
		t.Errorf("401 WWW-Authenticate = %q, want a Basic challenge (browsers prompt on it)", h)
	}
	// A POST with credentials but from another site is still refused.
	status, _ := do(t, c, "POST", f.ts.URL+"/queues/"+queue+"/pause",
		http.Header{"Authorization": {"Bearer s3cret-token"}, "Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}, nil)
	if status != 403 {
		t.Errorf("authenticated cross-site POST: status %d, want 403", status)
	}
}

// TestHostCheck: without credentials the dashboard answers only requests
// addressed to an IP literal, localhost or an allowed host name, so that a
// page whose own host name was rebound to the dashboard's address (DNS
// rebinding) can neither read it nor act on it; with credentials set the
// Host is not checked.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	open := newFixture(t, web.Options{})
	allowed := newFixture(t, web.Options{AllowedHosts: []string{"Dash.Internal", "ops.example:8443"}})
	token := newFixture(t, web.Options{Token: "s3cret-token"})
	pause := "/queues/" + queue + "/pause"
	// req sends method path to f's server with Host host, as a rebound
	// page's fetch does: same-origin by the browser's lights.
	req := func(f *fixture, method, path, host string, header http.Header) (int, string) {
		t.Helper()
		r, err := http.NewRequest(method, f.ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Host = host
		for k, v := range header {
			r.Header[k] = v
		}
		if method == "POST" {
			r.Header.Set("Sec-Fetch-Site", "same-origin")
			r.Header.Set("Origin", "http://"+host)
		}
		resp, err := noRedirects(f.ts.Client()).Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	port := mustURL(t, open.ts.URL).Port()
	for _, tc := range []struct {
		name         string
		f            *fixture
		method, path string
		host         string
		header       http.Header
		want         int
	}{
		{"rebound name, GET task page", open, "GET", "/queues/" + queue + "/tasks/" + open.failed, "evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"rebound name, GET JSON", open, "GET", "/api/queues", "evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"rebound name, POST pause", open, "POST", pause, "evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"rebound name without port", open, "GET", "/", "evil.example", nil, http.StatusMisdirectedRequest},
		{"localhost.evil.example", open, "GET", "/", "localhost.evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"IPv4 literal", open, "GET", "/", "127.0.0.1:" + port, nil, 200},
		{"IPv6 literal", open, "GET", "/", "[::1]:" + port, nil, 200},
		{"localhost", open, "GET", "/", "localhost:" + port, nil, 200},
		{"LOCALHOST without port", open, "GET", "/", "LOCALHOST", nil, 200},
		{"allowed name, any port", allowed, "GET", "/", "dash.internal:" + port, nil, 200},
		{"allowed name, POST", allowed, "POST", pause, "dash.internal:" + port, nil, 303},
		{"allowed name and port", allowed, "GET", "/", "ops.example:8443", nil, 200},
		{"allowed name, other port", allowed, "GET", "/", "ops.example:" + port, nil, http.StatusMisdirectedRequest},
		{"name not allowed", allowed, "GET", "/", "evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"token: foreign name without token", token, "GET", "/", "evil.example:" + port, nil, 401},
		{"token: foreign name with token", token, "GET", "/", "evil.example:" + port, http.Header{"Authorization": {"Bearer s3cret-token"}}, 200},
	} {
		status, body := req(tc.f, tc.method, tc.path, tc.host, tc.header)
		if status != tc.want {
			t.Errorf("%s: %s %s with Host %s: status %d, want %d (without credentials only IP literals, localhost and AllowedHosts are answered: DNS rebinding)\n%s", tc.name, tc.method, tc.path, tc.host, status, tc.want, body)
		}
		if status == http.StatusMisdirectedRequest && (strings.Contains(body, queue) || !strings.Contains(body, "AllowedHosts")) {
			t.Errorf("%s: the 421 page must show no queue and name AllowedHosts:\n%s", tc.name, body)
		}
	}
	if paused, _ := open.srv.Paused(context.Background()); len(paused) != 0 {
		t.Errorf("a POST under a rebound host name paused %v", paused)
	}
	if paused, _ := allowed.srv.Paused(context.Background()); len(paused) != 1 {
		t.Errorf("a POST under an allowed host name must pause the queue: paused %v", paused)
	}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

func TestCrossOriginPostsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{TrustedOrigins: []string{"https://ops.example.com"}})
	c := noRedirects(f.ts.Client())
	path := f.ts.URL + "/queues/" + queue + "/pause"
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"Sec-Fetch-Site cross-site", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"Sec-Fetch-Site same-site", http.Header{"Sec-Fetch-Site": {"same-site"}}, 403},
		{"foreign Origin, no Sec-Fetch-Site", http.Header{"Origin": {"https://evil.example"}}, 403},
		{"null Origin", http.Header{"Origin": {"null"}}, 403},
		{"same-origin fetch, foreign Referer", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Referer": {"https://evil.example/page"}}, 403},
		{"same-origin fetch, foreign Origin", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {"https://evil.example"}}, 403},
	} {
		status, body := do(t, c, "POST", path, tc.header, nil)
		if status != tc.status || !strings.Contains(body, "Cross-origin request refused") {
			t.Errorf("%s: status %d, want %d and the refusal page", tc.name, status, tc.status)
		}
	}
	if paused, _ := f.srv.Paused(context.Background()); len(paused) != 0 {
		t.Fatalf("a refused cross-origin POST paused %v", paused)
	}
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"same-origin fetch", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {f.ts.URL}, "Referer": {f.ts.URL + "/"}}},
		{"own Origin, no Sec-Fetch-Site", http.Header{"Origin": {f.ts.URL}}},
		{"trusted origin", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://ops.example.com"}}},
		{"no browser headers (curl)", nil},
	} {
		if status, body := do(t, c, "POST", path, tc.header, nil); status != 303 {
			t.Errorf("%s: status %d, want 303:\n%s", tc.name, status, body)
		}
	}
}

// TestMountedUnderAPrefix mounts the dashboard inside a server of its own
// under /ops/errand/ and follows every link of every page it reaches: all
// must stay under the prefix and answer 200.
func TestMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	for _, strip := range []string{"/ops/errand", "/ops/errand/"} {
		t.Run(strip, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle("/ops/errand/", http.StripPrefix(strip, f.dash))
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "outside the dashboard", 418) })
			ts := httptest.NewServer(mux)
			defer ts.Close()
			c := ts.Client()

			// The prefix without its slash goes to the prefix with it.
			mux2 := http.NewServeMux()
			mux2.Handle("/ops/errand", http.StripPrefix("/ops/errand", f.dash))
			ts2 := httptest.NewServer(mux2)
			defer ts2.Close()
			resp, err := noRedirects(ts2.Client()).Get(ts2.URL + "/ops/errand")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc, _ := resp.Location(); resp.StatusCode != 301 || loc == nil || loc.Path != "/ops/errand/" {
				t.Errorf("GET /ops/errand: %d to %v, want 301 to /ops/errand/", resp.StatusCode, loc)
			}

			seen := map[string]bool{}
			todo := []string{ts.URL + "/ops/errand/"}
			href := regexp.MustCompile(`(?:href|src|action)="([^"]*)"`)
			for len(todo) > 0 && len(seen) < 200 {
				u := todo[0]
				todo = todo[1:]
				if seen[u] {
					continue
				}
				seen[u] = true
				status, body := do(t, c, "GET", u, nil, nil)
				if status != 200 {
					t.Errorf("GET %s: status %d, want 200", u, status)
					continue
				}
				if !strings.Contains(u, "/assets/") && !strings.Contains(body, "<base href=") {
					t.Errorf("%s has no base href", u)
				}
				base, _ := url.Parse(u)
				baseTag := regexp.MustCompile(`<base href="([^"]*)">`)
				if m := baseTag.FindStringSubmatch(body); m != nil {
					base = base.ResolveReference(mustURL(t, html.UnescapeString(m[1])))
					body = baseTag.ReplaceAllString(body, "")
				}
				for _, m := range href.FindAllStringSubmatch(body, -1) {
					next := base.ResolveReference(mustURL(t, html.UnescapeString(m[1])))
					if !strings.HasPrefix(next.Path, "/ops/errand/") {
						t.Errorf("%s links to %s, outside the prefix", u, next)
						continue
					}
					if strings.Contains(m[0], "action=") {
						continue // a form: POST only
					}
					next.Fragment = ""
					todo = append(todo, next.String())
				}
			}
			for _, want := range []string{"/ops/errand/workers", "/ops/errand/queues/" + queue + "/archived", "/ops/errand/queues/" + queue + "/tasks/" + f.failed, "/ops/errand/assets/style.css"} {
				if !seen[ts.URL+want] {
					t.Errorf("following links from the overview never reached %s", want)
				}
			}

			// An action under the prefix redirects under the prefix.
			req, _ := http.NewRequest("POST", ts.URL+"/ops/errand/queues/"+queue+"/pause", strings.NewReader("back=overview"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", ts.URL)
			resp, err = noRedirects(c).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc, _ := resp.Location(); resp.StatusCode != 303 || loc.Path != "/ops/errand/" {
				t.Errorf("POST pause under the prefix: %d to %v, want 303 to /ops/errand/", resp.StatusCode, loc)
			}
			f.srv.Resume(context.Background(), queue)
		})
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("bad link %q: %v", s, err)
	}
	return u
}

func TestWorkersAndJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{})
	var ws []errand.WorkerInfo
	wait(t, "a worker's heartbeat in /api/workers", func() bool {
		_, body := f.get(t, "/api/workers")
		ws = nil
		return json.Unmarshal([]byte(body), &ws) == nil && len(ws) == 1
	})
	_, body := f.get(t, "/workers")
	if !strings.Contains(body, `data-worker="`+ws[0].ID+`"`) || !strings.Contains(body, ws[0].Host) {
		t.Errorf("the workers page does not show worker %s on %s:\n%s", ws[0].ID, ws[0].Host, body)
	}
	status, body := f.get(t, "/api/queues")
	var qs []struct {
		Name      string `json:"name"`
		Pending   int    `json:"pending"`
		Scheduled int    `json:"scheduled"`
		Retrying  *int   `json:"retrying"`
		Archived  int    `json:"archived"`
		Completed int64  `json:"completed"`
	}
	if err := json.Unmarshal([]byte(body), &qs); err != nil || status != 200 {
		t.Fatalf("/api/queues: %d, %v:\n%s", status, err, body)
	}
	if len(qs) != 1 || qs[0].Name != queue || qs[0].Scheduled != 1 || qs[0].Retrying == nil || *qs[0].Retrying != 0 || qs[0].Archived != 1 || qs[0].Completed != 3 {
		t.Errorf("/api/queues = %s, want %s with 1 scheduled, 0 retrying, 1 archived, 3 completed", body, queue)
	}
}

// TestThroughputChart runs tasks while the sampler samples fast, and sees a
// line on the overview's chart.
func TestThroughputChart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, web.Options{SampleEvery: 20 * time.Millisecond, History: time.Minute})
	ctx := context.Background()
	wait(t, "a line on the throughput chart", func() bool {
		r, err := f.srv.SendTask(ctx, errand.NewSignature("add", 1, 1))
		if err != nil {
			t.Fatal(err)
		}
		r.Get(ctx)
		_, body := f.get(t, "/")
		return strings.Contains(body, "<polyline") && strings.Contains(body, "<title>"+queue+":")
	})
}

// goroutines returns the stacks of the goroutines running the dashboard's
// code.
func goroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "errand/web.(*Dashboard)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// TestCloseStopsTheSampler: after Close no goroutine of the dashboard's
// runs (no leak), and Close may be called again.
func TestCloseStopsTheSampler(t *testing.T) {
	// Not parallel: it reads every goroutine's stack. What it opens is
	// closed when it ends, failed or not, so that a failure leaves no
	// sampler behind to fail the next test (or the next -count run).
	srv, err := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var ds []*web.Dashboard
	for range 3 {
		d := web.New(srv, web.Options{SampleEvery: time.Millisecond})
		t.Cleanup(func() { d.Close() })
		ds = append(ds, d)
	}
	if g := goroutines(); !strings.Contains(g, "sample") {
		t.Fatalf("no sampler goroutine runs after New:\n%s", g)
	}
	for _, d := range ds {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	// Close returns once the sampler has closed its done channel, its
	// last step: the goroutine may still be returning (runnable at the
	// function's end) when Close does. Wait for it to be gone; a sampler
	// Close did not stop runs on past the bound.
	if g := goroutinesGone(5 * time.Second); g != "" {
		t.Fatalf("goroutines of the dashboard still run 5s after Close:\n%s", g)
	}
	// The handler still serves after Close.
	rec := httptest.NewRecorder()
	ds[0].ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/", nil))
	if rec.Code != 200 {
		t.Errorf("GET / after Close: %d", rec.Code)
	}
}

// goroutinesGone polls until no goroutine of a dashboard runs, and
// returns those still running after bound (a hang bound, not a timing
// claim), or "".
func goroutinesGone(bound time.Duration) string {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		g := goroutines()
		if g == "" || time.Now().After(deadline) {
			return g
		}
		<-tick.C
	}
}

// The dashboard in a server of your own, under a prefix.
func Example() {
	srv, _ := errand.NewServer(errand.Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	defer srv.Close()
	dash := web.New(srv, web.Options{ReadOnly: true})
	defer dash.Close()

	mux := http.NewServeMux()
	mux.Handle("/errand/", http.StripPrefix("/errand", dash))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost:8080/errand/", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output: 200 text/html; charset=utf-8
}

// TestSignedTaskShownWithItsCheck (issue 24, item 6): the dashboard shows a
// signed message decoded, and marked with what its server's keys make of
// the signature: verified under the right key; failed, with the worker's
// reason, under a wrong one (still decoded, not "undecodable"); signed but
// unverified without keys. A requeue it cannot sign again is refused with
// 409 and the page says why.
func TestSignedTaskShownWithItsCheck(t *testing.T) {
	t.Parallel()
	const q = "signed_q"
	key, other := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	server := func(sg *errand.Signing) *errand.Server {
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be, Signing: sg})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sig := errand.NewSignature("add", 40, 2)
	sig.RoutingKey = q
	if _, err := server(&errand.Signing{Keys: map[string][]byte{"k1": key}, SignWith: "k1"}).SendTask(ctx, sig); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		sg   *errand.Signing
		mark string
		note string
	}{
		{"the right key", &errand.Signing{Keys: map[string][]byte{"k1": key}}, "verified", `key &#34;k1&#34;`},
		{"a wrong key", &errand.Signing{Keys: map[string][]byte{"k1": other}}, "failed", `MAC does not verify under key &#34;k1&#34;`},
		{"no keys", nil, "unverified", `signed with key &#34;k1&#34;, which the dashboard&#39;s server has no key for`},
	} {
		dash := web.New(server(c.sg), web.Options{})
		ts := httptest.NewServer(dash)
		status, body := do(t, ts.Client(), "GET", ts.URL+"/queues/"+q+"/tasks/"+sig.UUID, nil, nil)
		if status != http.StatusOK {
			t.Fatalf("%s: GET the task page: status %d, want 200:\n%s", c.name, status, body)
		}
		for _, want := range []string{`data-signature="` + c.mark + `"`, c.note, "<h1>add ", "<pre>40</pre>", "<pre>2</pre>"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: the task page of a signed add(40, 2) should show %s; it does not:\n%s", c.name, want, body)
			}
		}
		if strings.Contains(body, "does not decode") {
			t.Errorf("%s: the task page calls a signed message undecodable:\n%s", c.name, body)
		}
		if failed := strings.Contains(body, `id="signature-failed"`); failed != (c.mark == "failed") {
			t.Errorf("%s: the page's 'signature does not verify' card shown: %v, want %v", c.name, failed, c.mark == "failed")
		}
		status, body = do(t, ts.Client(), "GET", ts.URL+"/queues/"+q+"/pending", nil, nil)
		if status != http.StatusOK || !regexp.MustCompile(`data-task="`+sig.UUID+`"[^<]*<td[^>]*><a[^>]*>[^<]*</a></td>\s*<td>add <span class="sig `+c.mark+`" data-signature="`+c.mark+`"`).MatchString(body) {
			t.Errorf("%s: the pending list should show add marked %s; status %d:\n%s", c.name, c.mark, status, body)
		}
		ts.Close()
		dash.Close()
	}

	// A forged message in the archive: a dashboard with the key will not
	// requeue (sign again) what does not verify.
	worker := server(&errand.Signing{Keys: map[string][]byte{"k1": key}, Require: true})
	w := worker.NewWorker(errand.WorkerConfig{Queues: map[string]int{q: 1}})
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Shutdown(ctx)
	})
	forged := errand.NewSignature("add", 1, 1)
	forged.RoutingKey = q
	if _, err := server(&errand.Signing{Keys: map[string][]byte{"k1": other}, SignWith: "k1"}).SendTask(ctx, forged); err != nil {
		t.Fatal(err)
	}
	wait(t, "the forged task in the archive", func() bool {
		_, err := worker.ArchivedTask(ctx, q, forged.UUID)
		return err == nil
	})
	dash := web.New(server(&errand.Signing{Keys: map[string][]byte{"k1": key}}), web.Options{})
	defer dash.Close()
	ts := httptest.NewServer(dash)
	defer ts.Close()
	f := &fixture{ts: ts}
	if resp := f.post(t, "/queues/"+q+"/tasks/"+forged.UUID+"/requeue", nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("POST requeue of a forged task: status %d, want 409 (errand does not sign again what does not verify)", resp.StatusCode)
	}
	if _, err := worker.ArchivedTask(ctx, q, forged.UUID); err != nil {
		t.Errorf("a refused requeue took the forged task out of the archive: %v", err)
	}
	status, body := do(t, ts.Client(), "GET", ts.URL+"/queues/"+q+"/archived", nil, nil)
	if status != http.StatusOK || !strings.Contains(body, `data-signature="failed"`) {
		t.Errorf("the archive should list the forged task marked failed; status %d:\n%s", status, body)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// errand web, run in-process (run, with its ctx cancelled as SIGINT does)
// over the real Redis of ERRAND_REDIS_URL, a key prefix of its own per
// test: the dashboard and /metrics show the seeded queue, the credentials
// come from the environment, --read-only refuses actions, and cancelling
// the ctx shuts everything down.

// webRun is one errand web running in a goroutine.
type webRun struct {
	t      *testing.T
	base   string // http://host:port, from the line it prints
	line   string // that line
	cancel context.CancelFunc
	done   chan int // its exit code
	stderr *syncBuffer
	client *http.Client
}

// syncBuffer is a bytes.Buffer written by the server's goroutines and read
// by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingLine = regexp.MustCompile(`^errand web: serving .* on (http://\S+)/ \(listening on (\S+);`)

// startWeb runs errand web with args (and --addr 127.0.0.1:0) over d, env
// adding to ERRAND_BROKER_URL, and returns once it printed the URL it
// serves on.
func startWeb(t *testing.T, d *deployment, env map[string]string, args ...string) *webRun {
	t.Helper()
	if d.url == "" {
		t.Fatal("startWeb needs a deployment opened by URL")
	}
	all := map[string]string{"ERRAND_BROKER_URL": d.url}
	for k, v := range env {
		all[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	w := &webRun{t: t, cancel: cancel, done: make(chan int, 1), stderr: new(syncBuffer), client: &http.Client{Timeout: 30 * time.Second}}
	go func() {
		code := run(ctx, append([]string{"web", "--addr", "127.0.0.1:0"}, args...), pw, w.stderr, func(k string) string { return all[k] })
		pw.Close()
		w.done <- code
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			t.Errorf("errand web did not return within 30s of its ctx being cancelled")
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		if first {
			close(lines)
		}
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("errand web printed nothing on stdout and exited; stderr:\n%s", w.stderr)
		}
		w.line = l
	case <-time.After(30 * time.Second):
		t.Fatalf("errand web printed no line within 30s; stderr:\n%s", w.stderr)
	}
	m := servingLine.FindStringSubmatch(w.line)
	if m == nil {
		t.Fatalf("errand web's first line must say the URL it serves on and its address, got %q", w.line)
	}
	w.base = m[1]
	if strings.HasPrefix(m[2], "127.0.0.1:") && m[1] != "http://"+m[2] {
		t.Errorf("errand web on 127.0.0.1:0 prints URL %s for address %s: want the same host and port", m[1], m[2])
	}
	return w
}

// do sends one request and returns the status and body.
func (w *webRun) do(method, path, token string) (int, string) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.base+path, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// stop cancels errand web's ctx (SIGINT in main) and checks the promises
// of its shutdown: exit 0, the port closed, no goroutine of the server,
// the dashboard's sampler or the metrics left.
func (w *webRun) stop() {
	w.t.Helper()
	w.client.CloseIdleConnections()
	w.cancel()
	select {
	case code := <-w.done:
		if code != exitOK {
			w.t.Errorf("errand web ended by its ctx must exit 0, got %d; stderr:\n%s", code, w.stderr)
		}
	case <-time.After(30 * time.Second):
		w.t.Fatalf("errand web did not return within 30s of its ctx being cancelled")
	}
	w.done <- exitOK // for the cleanup
	host := strings.TrimPrefix(w.base, "http://")
	if c, err := net.DialTimeout("tcp", host, 5*time.Second); err == nil {
		c.Close()
		w.t.Errorf("errand web returned, but %s still accepts connections", host)
	}
	eventually(w.t, "no goroutine of errand web left", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, mark := range []string{"main.runWeb", "errand/web.", "net/http.(*Server)", "net/http.(*conn)", "net/http.(*persistConn)", "errand/otel."} {
				if strings.Contains(g, mark) {
					return false
				}
			}
		}
		return true
	})
}

// The dashboard and /metrics of an open errand web show the seeded queue;
// cancelling its ctx shuts it down cleanly: over Redis and over PostgreSQL.
func TestWeb(t *testing.T) {
	t.Run("redis", func(t *testing.T) { testWeb(t, redisDeployment(t)) })
	t.Run("postgres", func(t *testing.T) { testWeb(t, postgresDeployment(t)) })
}

func testWeb(t *testing.T, d *deployment) {
	for range 2 {
		d.send("add", 0, 1, 2)
	}
	scheduled := d.send("add", time.Hour, 3, 4)
	w := startWeb(t, d, nil)
	if !strings.Contains(w.line, "actions enabled") || !strings.Contains(w.line, "no authentication") || !strings.Contains(w.line, "/metrics") {
		t.Errorf("the first line must say actions are enabled, there is no authentication and /metrics is served: %q", w.line)
	}
	if s := w.stderr.String(); strings.Contains(s, "warning") {
		t.Errorf("on a loopback address errand web must not warn about authentication, got:\n%s", s)
	}

	code, body := w.do("GET", "/", "")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d, want 200\n%s", code, body)
	}
	if !strings.Contains(body, d.queue) || !strings.Contains(body, `data-count="pending">2<`) {
		t.Errorf("GET / must list queue %s with 2 pending; got:\n%s", d.queue, body)
	}

	code, body = w.do("GET", "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d, want 200\n%s", code, body)
	}
	for state, n := range map[string]int{"pending": 2, "delayed": 1, "in_flight": 0, "dead": 0} {
		re := fmt.Sprintf(`(?m)^errand_queue_depth\{[^}]*messaging_destination_name="%s"[^}]*state="%s"[^}]*\} %d$`, regexp.QuoteMeta(d.queue), state, n)
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("/metrics must have errand_queue_depth %d for queue %s, state %s (errand web observes every queue the broker lists); it serves:\n%s", n, d.queue, state, grepLines(body, "errand_queue_depth"))
		}
	}

	// A queue that appears after errand web started is on the next scrape.
	later := d.queue + "-later"
	d2 := *d
	d2.queue = later
	d2.send("add", 0, 5, 6)
	_, body = w.do("GET", "/metrics", "")
	if !strings.Contains(body, `messaging_destination_name="`+later+`"`) {
		t.Errorf("/metrics must list queue %s, created after errand web started: the queues are listed at each scrape; it serves:\n%s", later, grepLines(body, "errand_queue_depth"))
	}

	// Cancel the scheduled task from the dashboard: the browser lands on
	// its page, which says CANCELLED, as the backend does.
	code, body = w.do("POST", "/queues/"+d.queue+"/tasks/"+scheduled+"/cancel", "")
	if code != http.StatusOK || !strings.Contains(body, `data-state="CANCELLED"`) || !strings.Contains(body, "Cancelled: the task never starts") {
		t.Errorf("POST cancel of the scheduled task: want its page (200) saying CANCELLED, got %d:\n%s", code, body)
	}
	d.state(scheduled, errand.StateCancelled)
	w.stop()
}

// The credentials come from the environment: without the bearer token
// every page and /metrics answer 401; --read-only refuses POST with 403;
// --metrics=false serves no /metrics.
func TestWebTokenReadOnly(t *testing.T) {
	d := redisDeployment(t)
	d.send("add", 0, 1, 2)
	const token = "s3cret-token"
	w := startWeb(t, d, map[string]string{envWebToken: token}, "--read-only", "--metrics=false")
	if !strings.Contains(w.line, "read-only") || !strings.Contains(w.line, "bearer token") || strings.Contains(w.line, "/metrics") {
		t.Errorf("the first line must say read-only, bearer token, and no /metrics: %q", w.line)
	}
	if strings.Contains(w.line, token) || strings.Contains(w.stderr.String(), token) {
		t.Errorf("errand web must never print the token")
	}
	for _, tc := range []struct {
		method, path, token string
		want                int
		why                 string
	}{
		{"GET", "/", "", http.StatusUnauthorized, "no token"},
		{"GET", "/", "wrong", http.StatusUnauthorized, "a wrong token"},
		{"GET", "/", token, http.StatusOK, "the token of ERRAND_WEB_TOKEN"},
		{"GET", "/api/queues", "", http.StatusUnauthorized, "no token, JSON"},
		{"POST", "/queues/" + d.queue + "/pause", token, http.StatusForbidden, "--read-only refuses every POST"},
		{"GET", "/metrics", token, http.StatusNotFound, "--metrics=false"},
	} {
		if code, body := w.do(tc.method, tc.path, tc.token); code != tc.want {
			t.Errorf("%s %s (%s): %d, want %d\n%s", tc.method, tc.path, tc.why, code, tc.want, body)
		}
	}
	if paused, err := d.srv.Paused(context.Background()); err != nil || len(paused) > 0 {
		t.Errorf("a refused pause must change nothing: paused %v, err %v", paused, err)
	}
	w.stop()
}

// /metrics asks for the same credentials as the dashboard (here basic
// authentication).
func TestWebMetricsAuth(t *testing.T) {
	d := redisDeployment(t)
	d.send("add", 0, 1, 2)
	w := startWeb(t, d, map[string]string{envWebUser: "ops", envWebPassword: "pw"})
	if !strings.Contains(w.line, "basic authentication") {
		t.Errorf("the first line must say basic authentication: %q", w.line)
	}
	if code, _ := w.do("GET", "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without credentials: %d, want 401 (the dashboard's credentials guard /metrics too)", code)
	}
	req, _ := http.NewRequest("GET", w.base+"/metrics", nil)
	req.SetBasicAuth("ops", "pw")
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `messaging_destination_name="`+d.queue+`"`) {
		t.Errorf("GET /metrics with basic authentication: %d, want 200 with queue %s\n%s", resp.StatusCode, d.queue, grepLines(string(body), "errand_queue_depth"))
	}
	w.stop()
}

// Beyond loopback without credentials errand web serves, with a warning
// on stderr.
func TestWebWarnsBeyondLoopback(t *testing.T) {
	w := startWeb(t, &deployment{t: t, url: "memory://"}, nil, "--addr", "0.0.0.0:0")
	if !strings.Contains(w.line, "http://localhost:") {
		t.Errorf("on every interface the URL to open is localhost's, got %q", w.line)
	}
	if s := w.stderr.String(); !strings.Contains(s, "warning: listening on ") || !strings.Contains(s, "without authentication") || !strings.Contains(s, envWebToken) {
		t.Errorf("errand web on 0.0.0.0 without credentials must warn on stderr, naming %s; got:\n%s", envWebToken, s)
	}
	if code, _ := w.do("GET", "/", ""); code != http.StatusOK {
		t.Errorf("GET / on 0.0.0.0 without credentials: %d, want 200 (it serves, with the warning)", code)
	}
	w.stop()
}

// send sends one request with Host host (the URL's when "") and
// Authorization auth (none when "") and returns the status and body.
func (w *webRun) send(method, path, host, auth string) (int, string) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.base+path, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// /metrics takes the bearer token with the scheme in any case, as the
// dashboard does (RFC 9110: the scheme is case-insensitive).
func TestWebMetricsBearerAnyCase(t *testing.T) {
	const token = "s3cret-token"
	w := startWeb(t, &deployment{t: t, url: "memory://"}, map[string]string{envWebToken: token})
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer " + token, http.StatusOK},
		{"bearer " + token, http.StatusOK},
		{"BEARER " + token, http.StatusOK},
		{"bearer nope", http.StatusUnauthorized},
		{"", http.StatusUnauthorized},
	} {
		for _, p := range []string{"/metrics", "/"} {
			if code, body := w.send("GET", p, "", tc.auth); code != tc.want {
				t.Errorf("GET %s with Authorization %q: %d, want %d (/metrics and the dashboard take the same credentials, the scheme in any case)\n%s", p, tc.auth, code, tc.want, body)
			}
		}
	}
	// With credentials set, the Host is not checked: they protect it.
	if code, _ := w.send("GET", "/metrics", "evil.example", "Bearer "+token); code != http.StatusOK {
		t.Errorf("GET /metrics with the token and Host evil.example: %d, want 200 (with credentials the Host is not checked)", code)
	}
	w.stop()
}

// Without credentials errand web answers only requests addressed to an IP
// address, localhost or an --allowed-host name, on the dashboard and on
// /metrics alike: a page whose host name was rebound to 127.0.0.1 (DNS
// rebinding) reads nothing.
func TestWebHostCheck(t *testing.T) {
	w := startWeb(t, &deployment{t: t, url: "memory://"}, nil, "--allowed-host", "dash.internal, ops.example", "--allowed-host", "other.example:9090")
	port := w.base[strings.LastIndex(w.base, ":")+1:]
	for _, tc := range []struct {
		host string
		want int
	}{
		{"", http.StatusOK}, // 127.0.0.1:port
		{"localhost:" + port, http.StatusOK},
		{"evil.example:" + port, http.StatusMisdirectedRequest},
		{"dash.internal:" + port, http.StatusOK},
		{"ops.example", http.StatusOK},
		{"other.example:9090", http.StatusOK},
		{"other.example:" + port, http.StatusMisdirectedRequest},
	} {
		for _, p := range []string{"/", "/api/queues", "/metrics"} {
			if code, body := w.send("GET", p, tc.host, ""); code != tc.want {
				t.Errorf("GET %s with Host %q and no credentials: %d, want %d (the Host check against DNS rebinding, --allowed-host)\n%s", p, tc.host, code, tc.want, body)
			}
		}
	}
	if code, _ := w.send("POST", "/queues/q/pause", "evil.example:"+port, ""); code != http.StatusMisdirectedRequest {
		t.Errorf("POST pause with Host evil.example: %d, want 421", code)
	}
	w.stop()
}

// errand web listens on loopback unless told otherwise.
func TestWebDefaultAddress(t *testing.T) {
	var out, errOut bytes.Buffer
	run(context.Background(), []string{"help", "web"}, &out, &errOut, func(string) string { return "" })
	if help := out.String() + errOut.String(); !strings.Contains(help, `(default "127.0.0.1:8080")`) {
		t.Errorf("errand web's --addr must default to 127.0.0.1:8080 (loopback), help says:\n%s", help)
	}
}

// Usage errors of errand web: a password without a user, an argument.
func TestWebUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"web", "--addr", "127.0.0.1:0"}, map[string]string{envWebPassword: "pw", "ERRAND_BROKER_URL": "memory://"}, envWebPassword + " is set without " + envWebUser},
		{[]string{"web", "extra"}, map[string]string{"ERRAND_BROKER_URL": "memory://"}, `unexpected argument "extra"`},
		{[]string{"web", "--addr", "127.0.0.1:0"}, nil, "no broker"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut, func(k string) string { return tc.env[k] })
		if code != exitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("errand %v: want exit 2 saying %q, got exit %d\nstdout: %s\nstderr: %s", tc.args, tc.want, code, out.String(), errOut.String())
		}
	}
}

// grepLines returns the lines of text holding s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// errand web takes the signing keys from ERRAND_SIGNING_KEYS: a signed
// task's page says it verified; without the keys, that it is signed but
// unverified.
func TestWebSignedTask(t *testing.T) {
	d := redisDeployment(t)
	id := d.sendSigned(d.signer(testKey, false), 2, 3)
	for _, c := range []struct {
		env  map[string]string
		mark string
	}{
		{map[string]string{"ERRAND_SIGNING_KEYS": "k1=" + testB64}, "verified"},
		{nil, "unverified"},
	} {
		w := startWeb(t, d, c.env)
		code, body := w.do("GET", "/queues/"+d.queue+"/tasks/"+id, "")
		if code != http.StatusOK || !strings.Contains(body, `data-signature="`+c.mark+`"`) || !strings.Contains(body, "<pre>3</pre>") {
			t.Errorf("errand web with keys %v: the page of a signed add(2, 3) should show it decoded and %s; status %d:\n%s", c.env["ERRAND_SIGNING_KEYS"] != "", c.mark, code, body)
		}
		w.stop()
		if s := w.stderr.String(); strings.Contains(s, testB64) {
			t.Errorf("secrets promise broken: errand web logged a signing key:\n%s", s)
		}
	}
}

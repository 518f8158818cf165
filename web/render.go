package web

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/errand-go/errand"
)

//go:embed templates
var templateFS embed.FS

// pages holds one template per page, each the layout plus the page.
type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"pe": url.PathEscape,
	"sig": func(t errand.QueuedTask) string {
		mark, _ := signatureCheck(t)
		return mark
	},
	"sigNote": func(t errand.QueuedTask) string {
		_, note := signatureCheck(t)
		return note
	},
	"qe": url.QueryEscape,
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return ago(time.Since(t))
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format("2006-01-02 15:04:05.000")
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	},
	"clip": func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		return strings.ToValidUTF8(s[:n], "") + "…"
	},
	// progress is a task's last reported progress as compact JSON, ""
	// when none.
	"progress": func(st *errand.TaskState) string {
		if st == nil || len(st.Progress) == 0 {
			return ""
		}
		var buf bytes.Buffer
		if json.Compact(&buf, st.Progress) != nil {
			return string(st.Progress)
		}
		return buf.String()
	},
	// cancellable reports whether a task's recorded state lets the
	// dashboard offer to cancel it: recorded, and not finished.
	"cancellable": func(st *errand.TaskState) bool { return st != nil && !st.State.Terminal() },
	// running reports whether a task's recorded state says a worker has
	// it (RECEIVED, STARTED).
	"running": func(st *errand.TaskState) bool {
		return st != nil && (st.State == errand.StateReceived || st.State == errand.StateStarted)
	},
	"add":   func(a, b int) int { return a + b },
	"lower": strings.ToLower,
	"join":  strings.Join,
}

func parsePages() *pages {
	p := &pages{byName: make(map[string]*template.Template)}
	for _, name := range []string{"overview", "queue", "task", "workers", "error"} {
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
		p.byName[name] = t
	}
	return p
}

// view is what every page's template gets.
type view struct {
	Title    string
	Base     string // the dashboard's root, relative to this page: "./", "../", ...
	Nav      string // "queues" or "workers"
	ReadOnly bool
	Flash    string
	Refresh  int // seconds between automatic reloads; 0 for none
	Data     any
}

// base returns the relative path from r's page to the dashboard's root,
// whatever prefix the dashboard is mounted under.
func base(r *http.Request) string {
	n := strings.Count(r.URL.EscapedPath(), "/") - 1
	if n <= 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	v.Base = base(r)
	v.ReadOnly = d.opts.ReadOnly
	var buf bytes.Buffer
	if err := d.pages.byName[name].Execute(&buf, v); err != nil {
		d.log.Error("web: rendering a page", "page", name, "err", err)
		http.Error(w, "web: rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(buf.Bytes())
	}
}

// failure is the error page's data.
type failure struct {
	Status  int
	Title   string
	Text    string
	Err     string
	Back    string // a link back, relative to the root; "" for the overview
	BackFor string
}

// fail answers with an error page.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, title, text string, err error) {
	f := failure{Status: status, Title: title, Text: text}
	if err != nil {
		f.Err = err.Error()
	}
	if status >= 500 {
		d.log.Error("web: "+title, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	d.render(w, r, status, "error", view{Title: title, Data: f})
}

// failWith answers with the error page that fits err: unknown queue,
// unknown task, not archived, unsupported by the broker, or a failure.
func (d *Dashboard) failWith(w http.ResponseWriter, r *http.Request, err error, back, backFor string) {
	status, title, text := explain(err)
	f := failure{Status: status, Title: title, Text: text, Err: err.Error(), Back: back, BackFor: backFor}
	if status >= 500 {
		d.log.Error("web: "+title, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	d.render(w, r, status, "error", view{Title: title, Data: f})
}

// explain maps err onto an HTTP status and words for an operator.
func explain(err error) (status int, title, text string) {
	switch {
	case errors.Is(err, errand.ErrUnknownQueue):
		return http.StatusNotFound, "Unknown queue", "The broker knows no queue of this name. Queues appear once a task has been sent to them."
	case errors.Is(err, errand.ErrNotArchived):
		return http.StatusConflict, "Task not archived", "Only archived tasks (those that failed for good) can be requeued or deleted, and this one is not in the archive: it may have been requeued or deleted meanwhile, or it never failed for good."
	case errors.Is(err, errand.ErrTaskNotFound):
		return http.StatusNotFound, "Task not found", "Neither the queue's lists nor the result backend know this task: the ID is wrong, or its record has expired."
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusNotImplemented, "Not supported by this broker", "The broker driver does not have the ability this page needs."
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "The broker or backend did not answer in time", "Try again; if it lasts, check the servers."
	case errors.Is(err, errand.ErrBadSignature):
		return http.StatusConflict, "The signature does not allow it", "The task's message is signed, and its signature does not verify under the dashboard's keys or names a key the dashboard does not have: errand will not sign it again. Give the dashboard's server the key (Config.Signing), or delete the task."
	case errors.Is(err, errand.ErrClosed):
		return http.StatusServiceUnavailable, "The server is closed", "The errand server behind the dashboard has been closed."
	}
	return http.StatusInternalServerError, "Something went wrong", "The broker or the backend returned an error."
}

// seeOther redirects the browser, after a POST, to rel: a path relative to
// the dashboard's root, so it works under any prefix.
func seeOther(w http.ResponseWriter, r *http.Request, rel string) {
	w.Header().Set("Location", base(r)+rel)
	w.WriteHeader(http.StatusSeeOther)
}

// redirectToSlash sends a request for the dashboard's prefix without its
// trailing slash to the prefix with it.
func redirectToSlash(w http.ResponseWriter, r *http.Request) {
	p := requestPath(r)
	last := p[strings.LastIndex(p, "/")+1:]
	w.Header().Set("Location", "./"+last+"/")
	w.WriteHeader(http.StatusMovedPermanently)
}

// requestPath is the path the client asked for, before any StripPrefix.
func requestPath(r *http.Request) string {
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		return u.EscapedPath()
	}
	return r.URL.EscapedPath()
}

// writeJSON answers with v as JSON.
func (d *Dashboard) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		d.log.Warn("web: writing JSON", "path", r.URL.Path, "err", err)
	}
}

// jsonError answers an API request with {"error": ...}.
func (d *Dashboard) jsonError(w http.ResponseWriter, r *http.Request, err error) {
	status, title, _ := explain(err)
	if status >= 500 {
		d.log.Error("web: "+title, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error(), "title": title})
}

// ago writes d as "3s ago", "5m ago", "2h ago", "4d ago".
func ago(d time.Duration) string {
	switch {
	case d <= -time.Second:
		return "in " + strings.TrimSuffix(ago(-d), " ago")
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

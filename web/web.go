package web

import (
	"context"
	"embed"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/errand-go/errand"
)

// Options configures a Dashboard. The zero value is a dashboard with
// actions, no authentication, and defaults for the rest.
type Options struct {
	// ReadOnly hides the actions (requeue, delete, cancel, pause, resume) and
	// refuses every POST with 403 Forbidden. Default: false.
	ReadOnly bool

	// Token, when set, is accepted as "Authorization: Bearer <Token>".
	// Default: "" (no bearer token).
	Token string
	// Username and Password, when Username is set, are accepted as HTTP
	// basic authentication. Default: "" (no basic authentication).
	//
	// When Token or Username is set, a request without valid credentials
	// gets 401 Unauthorized. When neither is set, see AllowedHosts.
	Username, Password string

	// AllowedHosts are the host names ("dash.internal", or with a port,
	// "dash.internal:8080") a dashboard without Token and Username answers
	// under, besides IP literals and localhost (any port). Any other Host
	// gets 421 Misdirected Request: without credentials, the Host check is
	// what stops DNS rebinding (a page on evil.example, its name pointed
	// at 127.0.0.1, reading and changing a dashboard on loopback). With
	// Token or Username set the credentials protect the dashboard and the
	// Host is not checked. Default: none.
	AllowedHosts []string

	// TrustedOrigins are origins ("https://ops.example.com") allowed to
	// POST besides the dashboard's own. Default: none.
	TrustedOrigins []string

	// Logger receives the errors the dashboard answers with 500 and the
	// sampler's failures. Default: discards everything.
	Logger *slog.Logger

	// PageSize is how many tasks a list page shows. Default: 25.
	PageSize int
	// SampleEvery is how often the throughput sampler reads the queues'
	// counts. Default: 5s.
	SampleEvery time.Duration
	// History is how far back the throughput chart reaches. Default: 10m.
	History time.Duration
	// CallTimeout bounds the broker and backend calls of one request (and
	// of one sample). Default: 10s.
	CallTimeout time.Duration
}

// Dashboard is the dashboard's http.Handler. It runs one goroutine, the
// throughput sampler, from New until Close.
type Dashboard struct {
	srv     *errand.Server
	opts    Options
	log     *slog.Logger
	handler http.Handler
	pages   *pages
	samples *sampler

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

//go:embed assets
var assets embed.FS

// New returns the dashboard of srv and starts its throughput sampler; call
// Close to stop it. srv may be a server of its own, built on the broker and
// backend the workers use: the dashboard registers no tasks and sends none.
func New(srv *errand.Server, opts Options) *Dashboard {
	if opts.PageSize <= 0 {
		opts.PageSize = 25
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = 5 * time.Second
	}
	if opts.History <= 0 {
		opts.History = 10 * time.Minute
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 10 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Dashboard{
		srv:     srv,
		opts:    opts,
		log:     log,
		pages:   parsePages(),
		samples: newSampler(int(opts.History/opts.SampleEvery) + 1),
		done:    make(chan struct{}),
	}
	d.handler = d.protect(d.routes())
	ctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	go d.sample(ctx)
	return d
}

// Close stops the throughput sampler and waits for it to return. The
// handler keeps serving pages (with a chart that no longer moves). Close
// does not close the errand.Server.
func (d *Dashboard) Close() error {
	d.closeOnce.Do(func() {
		d.stop()
		<-d.done
	})
	return nil
}

// ServeHTTP serves the dashboard.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/") {
		// Mounted under a prefix by http.StripPrefix. Asked for the prefix
		// without its slash ("/errand" under StripPrefix("/errand", d)):
		// send the browser to "/errand/", so relative links resolve. Under
		// StripPrefix("/errand/", d) the paths lack their leading slash:
		// put it back.
		if r.URL.Path == "" && !strings.HasSuffix(requestPath(r), "/") {
			redirectToSlash(w, r)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path = "/" + u.Path
		if u.RawPath != "" {
			u.RawPath = "/" + u.RawPath
		}
		r2.URL = &u
		r = r2
	}
	d.handler.ServeHTTP(w, r)
}

// routes is the dashboard's mux, before authentication and the checks on
// POST.
func (d *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.overview)
	mux.HandleFunc("GET /queues/{queue}", d.queue)
	mux.HandleFunc("GET /queues/{queue}/{list}", d.queue)
	mux.HandleFunc("GET /queues/{queue}/tasks/{id}", d.task)
	mux.HandleFunc("GET /workers", d.workers)
	mux.HandleFunc("GET /api/queues", d.apiQueues)
	mux.HandleFunc("GET /api/workers", d.apiWorkers)
	mux.HandleFunc("GET /assets/style.css", d.asset("style.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /assets/app.js", d.asset("app.js", "text/javascript; charset=utf-8"))

	mux.HandleFunc("POST /queues/{queue}/pause", d.pause)
	mux.HandleFunc("POST /queues/{queue}/resume", d.resume)
	mux.HandleFunc("POST /queues/{queue}/requeue-all", d.requeueAll)
	mux.HandleFunc("POST /queues/{queue}/delete-all", d.deleteAll)
	mux.HandleFunc("POST /queues/{queue}/tasks/{id}/requeue", d.requeue)
	mux.HandleFunc("POST /queues/{queue}/tasks/{id}/delete", d.deleteTask)
	mux.HandleFunc("POST /queues/{queue}/tasks/{id}/cancel", d.cancelTask)

	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "Page not found", "There is no page at this address.", nil)
	})
	return mux
}

// call returns the ctx of one request's broker and backend calls.
func (d *Dashboard) call(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.opts.CallTimeout)
}

// asset serves one embedded file.
func (d *Dashboard) asset(name, contentType string) http.HandlerFunc {
	body, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic("web: missing embedded asset " + name)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "max-age=300")
		w.Write(body)
	}
}

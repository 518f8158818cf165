package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/web"
)

// chromium returns the path of a Chromium to drive: ERRAND_CHROMIUM
// (scripts/services exports it), else chromium on PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("ERRAND_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			conformance.ServiceUnavailable(t, "ERRAND_CHROMIUM="+p+": "+err.Error())
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	conformance.ServiceUnavailable(t, "no Chromium: set ERRAND_CHROMIUM or install Debian's chromium (scripts/services start does)")
	return ""
}

// dropKeys deletes every key under prefix.
func dropKeys(rdb goredis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}

// TestDashboardInChromium drives the web dashboard in headless Chromium over
// the Redis broker and backend: the overview shows the seeded queue's
// counts, the archived task's page shows its failure, and its Requeue
// button runs it again to SUCCESS; a running task's page shows its
// progress, and its Cancel button on the workers page cancels it
// (CANCELLED, its ctx cancelled). It saves a full-page screenshot of the
// overview as dashboard.png in ERRAND_SCREENSHOT_DIR when that is set
// (docs/images/dashboard.png is one).
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t)
	chrome := chromium(t)
	prefix := fmt.Sprintf("errand-e2e-dash-%d", time.Now().UnixNano())
	t.Cleanup(func() { dropKeys(rdb, prefix) })

	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	be := redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix})
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: be, DefaultQueue: "emails"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var invoiceRuns atomic.Int32
	srv.Register("send_welcome", func(to string) (string, error) { return "sent to " + to, nil })
	srv.Register("render_invoice", func(id int) (string, error) {
		if invoiceRuns.Add(1) == 1 {
			return "", errand.Permanent(fmt.Errorf("invoice %d: template missing (first run only)", id))
		}
		return fmt.Sprintf("invoice-%d.pdf", id), nil
	})
	srv.Register("nightly_report", func(day int) (int, error) { return day * 7, nil })
	// long_export runs until its ctx ends (or the test does): the task the
	// dashboard cancels while it runs.
	exportStarted := make(chan struct{}, 1)
	exportCause := make(chan error, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv.Register("long_export", func(ctx context.Context) error {
		if err := errand.SetProgress(ctx, map[string]int{"rows": 1200, "of": 5000}); err != nil {
			return err
		}
		exportStarted <- struct{}{}
		select {
		case <-ctx.Done():
			exportCause <- context.Cause(ctx)
		case <-release:
		}
		return ctx.Err()
	})
	for _, q := range []string{"emails", "reports"} {
		w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{q: 1}, Concurrency: 4, Heartbeat: 200 * time.Millisecond, PausePoll: 100 * time.Millisecond})
		w.Start()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			w.Shutdown(ctx)
		})
	}

	dash := web.New(srv, web.Options{SampleEvery: 100 * time.Millisecond, History: 20 * time.Second})
	t.Cleanup(func() { dash.Close() })
	ts := httptest.NewServer(dash)
	t.Cleanup(ts.Close)

	// Seed: tasks done in bursts, each in a sample of its own (so the chart
	// has a shape), one that fails for good (archived), one due in an hour.
	ctx, cancel := context.WithTimeout(context.Background(), scaledWait(60*time.Second))
	defer cancel()
	done := map[string]int{}
	for burst := range 16 {
		var rs []*errand.AsyncResult
		for i := range 2 + (burst*7)%5 {
			sig := errand.NewSignature("send_welcome", fmt.Sprintf("user%d-%d@example.com", burst, i))
			if i%3 == 1 {
				sig = errand.NewSignature("nightly_report", burst)
				sig.RoutingKey = "reports"
			}
			r, err := srv.SendTask(ctx, sig)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		for _, r := range rs {
			if _, err := r.Get(ctx); err != nil {
				t.Fatalf("seeding: %v", err)
			}
			done[r.Signature.RoutingKey]++
		}
		// Spread the bursts over the sampler's ticks: the next burst
		// starts once a sample taken after this one is on the chart.
		waitChartPoints(t, ts.URL, chartPoints(t, ts.URL)+1)
	}
	done["emails"] += done[""]
	fr, err := srv.SendTask(ctx, errand.NewSignature("render_invoice", 1042))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fr.Get(ctx); err == nil {
		t.Fatal("render_invoice's first run succeeded; the test needs it to fail")
	}
	failed := fr.Signature.UUID
	deadline := time.Now().Add(scaledWait(10 * time.Second))
	for {
		if _, err := srv.ArchivedTask(ctx, "emails", failed); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the failed task was not archived (the Redis broker is a driver.Archiver): %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	later := errand.NewSignature("send_welcome", "later@example.com")
	eta := time.Now().Add(time.Hour)
	later.ETA = &eta
	if _, err := srv.SendTask(ctx, later); err != nil {
		t.Fatal(err)
	}
	// Two more samples, so the chart reaches the present.
	waitChartPoints(t, ts.URL, chartPoints(t, ts.URL)+2)

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 800),
	)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	// The overview: the seeded counts. (The first call starts Chromium.)
	row := `tr[data-queue="emails"] `
	if err := chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(css(row+`[data-count="archived"]`)),
		chromedp.WaitVisible(css(`figure.chart polyline`)),
	); err != nil {
		t.Fatalf("the overview in Chromium: %v", err)
	}
	want := map[string]int{"pending": 0, "scheduled": 1, "inflight": 0, "archived": 1, "completed": done["emails"]}
	for k, n := range want {
		shown, err := chromedp.Run(bctx, chromedp.Text(css(row+`[data-count="`+k+`"]`)))
		if err != nil {
			t.Fatalf("reading count %s on the overview: %v", k, err)
		}
		if got, err := strconv.Atoi(strings.TrimSpace(shown)); err != nil || got != n {
			t.Errorf("the overview shows %s = %q for queue emails, want %d (seeded: %d done, 1 archived, 1 due in an hour)", k, shown, n, done["emails"])
		}
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveScreenshot(t, png)

	// The archived list, the failed task's page, Requeue, SUCCESS.
	if err := chromedp.Do(bctx,
		chromedp.Click(css(row+`a[data-count="archived"]`)),
		chromedp.WaitVisible(css(`tr[data-task="`+failed+`"]`)),
		chromedp.Click(css(`tr[data-task="`+failed+`"] td a`)),
		chromedp.WaitVisible(css(`#state[data-state="FAILURE"]`)),
	); err != nil {
		t.Fatalf("opening the archived task in Chromium: %v", err)
	}
	errText, err := chromedp.Run(bctx, chromedp.Text(css(`#error`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.Click(css(`#requeue`)), chromedp.WaitVisible(css(`.flash`))); err != nil {
		t.Fatalf("clicking Requeue in Chromium: %v", err)
	}
	flash, err := chromedp.Run(bctx, chromedp.Text(css(`.flash`)))
	if err != nil {
		t.Fatal(err)
	}
	// The page reloads itself every 2s until the task ends.
	if err := chromedp.Do(bctx, chromedp.WaitVisible(css(`#state[data-state="SUCCESS"]`))); err != nil {
		t.Fatalf("waiting for the requeued task's page to show SUCCESS: %v", err)
	}
	result, err := chromedp.Run(bctx, chromedp.Text(css(`#result`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errText, "template missing") {
		t.Errorf("the archived task's page shows the error %q, want the task's own", errText)
	}
	if !strings.Contains(flash, "Requeued") {
		t.Errorf("after Requeue the banner says %q, want it to say Requeued", flash)
	}
	if !strings.Contains(result, "invoice-1042.pdf") {
		t.Errorf("the requeued task's result is %q, want invoice-1042.pdf", result)
	}
	if _, err := srv.ArchivedTask(ctx, "emails", failed); !errors.Is(err, errand.ErrNotArchived) {
		t.Errorf("the requeued task is still archived (err %v)", err)
	}

	// A running task: its page shows the progress it reported. Cancelled
	// from the workers page: the Cancel button beside it asks for
	// confirmation (accepted here), the banner says the task was running,
	// its page says CANCELLED, and its handler's ctx ends with the cause
	// ErrCancelled.
	export := errand.NewSignature("long_export")
	export.RoutingKey = "reports"
	if _, err := srv.SendTask(ctx, export); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exportStarted:
	case <-ctx.Done():
		t.Fatal("long_export did not start")
	}
	// The page reloads itself every 2s while the task runs.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+"/queues/reports/tasks/"+export.UUID),
		chromedp.WaitVisible(css(`#state[data-state="STARTED"]`)),
		chromedp.WaitVisible(css(`#progress`)),
	); err != nil {
		t.Fatalf("the running task's page in Chromium does not show its progress: %v", err)
	}
	progress, err := chromedp.Run(bctx, chromedp.Text(css(`#progress`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress, `"rows": 1200`) {
		t.Errorf("the running task's page shows the progress %q, want the one it reported (rows 1200 of 5000)", progress)
	}
	// Accept the confirmation Cancel asks for, keeping what it said.
	dctx, stopDialogs := context.WithCancel(bctx)
	defer stopDialogs()
	dialogs := chromedp.Events(dctx, page.JavascriptDialogOpening)
	confirmed := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			select {
			case confirmed <- ev.Message:
			default:
			}
			// Answered from another goroutine than the one reading events.
			go chromedp.Do(dctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
				return err
			}))
		}
	}()
	running := `[data-running="` + export.UUID + `"] `
	if err := chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+"/workers"),
		chromedp.WaitVisible(css(running+`button`)),
		chromedp.Click(css(running+`button`)),
		chromedp.WaitVisible(css(`.flash`)),
	); err != nil {
		t.Fatalf("clicking Cancel beside the running task on the workers page in Chromium: %v", err)
	}
	if flash, err = chromedp.Run(bctx, chromedp.Text(css(`.flash`))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Cancelled: the task was running") {
		t.Errorf("after Cancel on the workers page the banner says %q, want it to say the running task was cancelled", flash)
	}
	select {
	case msg := <-confirmed:
		if !strings.Contains(msg, export.UUID) {
			t.Errorf("Cancel must ask for confirmation naming the task; the dialog said %q", msg)
		}
	default:
		t.Error("Cancel on the workers page asked for no confirmation")
	}
	if err := chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+"/queues/reports/tasks/"+export.UUID),
		chromedp.WaitVisible(css(`#state[data-state="CANCELLED"]`)),
	); err != nil {
		t.Fatalf("the cancelled task's page in Chromium does not say CANCELLED: %v", err)
	}
	select {
	case cause := <-exportCause:
		if !errors.Is(cause, errand.ErrCancelled) {
			t.Errorf("the cancelled task's ctx ended with cause %v, want ErrCancelled", cause)
		}
	case <-ctx.Done():
		t.Fatal("the cancelled task's ctx did not end: its worker did not learn of the cancel")
	}
	if st, err := srv.Result(export.UUID).State(ctx); err != nil || st.State != errand.StateCancelled {
		t.Errorf("the cancelled task's recorded state: %+v, %v; want CANCELLED", st, err)
	}
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// scaledWait multiplies d by ERRAND_CONFORMANCE_TIMEOUT_SCALE (default 1),
// for slow machines.
func scaledWait(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv(conformance.ScaleEnv), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

var chartPointsAttr = regexp.MustCompile(`<polyline class="line"[^>]* points="([^"]*)"`)

// chartPoints returns how many points the throughput chart of the
// overview at base draws, over every queue's line: one more per queue
// with each sample the dashboard's sampler takes.
func chartPoints(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatalf("GET the overview: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the overview: status %d, %v", resp.StatusCode, err)
	}
	n := 0
	for _, m := range chartPointsAttr.FindAllStringSubmatch(string(body), -1) {
		n += len(strings.Fields(m[1]))
	}
	return n
}

// waitChartPoints polls the overview at base until its chart draws at
// least n points: the sampler has taken the samples they stand for.
func waitChartPoints(t *testing.T, base string, n int) {
	t.Helper()
	limit := scaledWait(10 * time.Second)
	deadline := time.Now().Add(limit)
	for {
		got := chartPoints(t, base)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for the throughput chart to draw %d points (the sampler takes one per queue every Options.SampleEvery); it draws %d", limit, n, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// saveScreenshot writes png to the test's temporary directory, and to
// $ERRAND_SCREENSHOT_DIR/dashboard.png when that is set.
func saveScreenshot(t *testing.T, png []byte) {
	if err := os.WriteFile(filepath.Join(t.TempDir(), "dashboard.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("ERRAND_SCREENSHOT_DIR"); dir != "" {
		p := filepath.Join(dir, "dashboard.png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of the overview: %s (%d bytes)", p, len(png))
	}
}

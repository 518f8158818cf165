package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/errand-go/errand"
)

// splitBound is the most delayed messages a queue may hold for the
// dashboard to split them into scheduled (first attempts) and retrying: the
// split reads each of them. Above it the count shows scheduled and
// retrying together.
const splitBound = 200

// queueRow is one queue as the overview and the queue page show it.
type queueRow struct {
	errand.QueueInfo
	// Scheduled and Retrying split Stats.Delayed when Split; otherwise
	// Scheduled is Stats.Delayed (retries included).
	Scheduled, Retrying int
	Split               bool
	// Rate is the latest throughput in tasks per minute, "" before two
	// samples.
	Rate string
}

func (d *Dashboard) row(ctx context.Context, qi errand.QueueInfo, rates map[string]float64) queueRow {
	row := queueRow{QueueInfo: qi, Scheduled: qi.Stats.Delayed}
	if r, ok := rates[qi.Name]; ok {
		row.Rate = formatRate(r)
	}
	switch {
	case qi.Stats.Delayed == 0:
		row.Split = true
	case qi.Stats.Delayed <= splitBound:
		ts, err := d.srv.List(ctx, qi.Name, errand.ListRetrying, 0, splitBound)
		if err != nil {
			d.log.Warn("web: splitting scheduled from retrying", "queue", qi.Name, "err", err)
			break
		}
		row.Split, row.Retrying = true, len(ts)
		row.Scheduled = max(0, qi.Stats.Delayed-len(ts))
	}
	return row
}

type overviewData struct {
	Queues []queueRow
	Chart  chart
	Every  string
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.call(r)
	defer cancel()
	qs, err := d.srv.Queues(ctx)
	if err != nil {
		d.failWith(w, r, err, "", "")
		return
	}
	ss := d.samples.snapshot()
	rates := lastRate(ss, d.opts.History/30)
	data := overviewData{Chart: newChart(ss, time.Now(), d.opts.History), Every: shortDuration(d.opts.SampleEvery)}
	for _, q := range qs {
		data.Queues = append(data.Queues, d.row(ctx, q, rates))
	}
	d.render(w, r, http.StatusOK, "overview", view{
		Title: "Queues", Nav: "queues", Flash: flash(r), Refresh: 5, Data: data,
	})
}

// listTab is one list's tab on the queue page.
type listTab struct {
	List   errand.ListState
	Label  string
	Count  string
	Active bool
}

type queueData struct {
	Queue    queueRow
	Tabs     []listTab
	List     errand.ListState
	Tasks    []errand.QueuedTask
	Page     int
	Prev     int // 0: none
	Next     int // 0: none
	Archived bool
	// Cancellable: the list's tasks may not have finished (pending,
	// scheduled, retrying, in flight), so a row whose state is not
	// terminal offers Cancel.
	Cancellable bool
	ListErr     string
	AtLabel     string
}

var listLabels = map[errand.ListState]string{
	errand.ListPending:   "Pending",
	errand.ListScheduled: "Scheduled",
	errand.ListRetrying:  "Retrying",
	errand.ListInFlight:  "In flight",
	errand.ListArchived:  "Archived",
	errand.ListCompleted: "Completed",
}

var atLabels = map[errand.ListState]string{
	errand.ListScheduled: "Due",
	errand.ListRetrying:  "Due",
	errand.ListArchived:  "Archived",
	errand.ListCompleted: "Acked",
}

func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	l := errand.ListPending
	if s := r.PathValue("list"); s != "" {
		var err error
		if l, err = errand.ParseListState(s); err != nil {
			d.fail(w, r, http.StatusNotFound, "Unknown list", "A queue's lists are pending, scheduled, retrying, inflight, archived and completed.", err)
			return
		}
	}
	page := 1
	if s := r.URL.Query().Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			d.fail(w, r, http.StatusBadRequest, "Bad page number", "The page number must be a whole number from 1.", nil)
			return
		}
		page = n
	}
	ctx, cancel := d.call(r)
	defer cancel()
	qi, err := d.srv.Queue(ctx, name)
	if err != nil {
		d.failWith(w, r, err, "", "")
		return
	}
	row := d.row(ctx, qi, d.latestRates())
	data := queueData{Queue: row, List: l, Page: page, Archived: l == errand.ListArchived, AtLabel: atLabels[l],
		Cancellable: l != errand.ListArchived && l != errand.ListCompleted}
	for _, ls := range errand.ListStates() {
		tab := listTab{List: ls, Label: listLabels[ls], Active: ls == l}
		switch ls {
		case errand.ListPending:
			tab.Count = strconv.Itoa(qi.Stats.Pending)
		case errand.ListScheduled:
			tab.Count = strconv.Itoa(row.Scheduled)
			if !row.Split {
				tab.Count += " (with retrying)"
			}
		case errand.ListRetrying:
			if row.Split {
				tab.Count = strconv.Itoa(row.Retrying)
			}
		case errand.ListInFlight:
			tab.Count = strconv.Itoa(qi.Stats.InFlight)
		case errand.ListArchived:
			tab.Count = strconv.Itoa(qi.Archived)
		}
		data.Tabs = append(data.Tabs, tab)
	}
	size := d.opts.PageSize
	ts, err := d.srv.List(ctx, name, l, (page-1)*size, size+1)
	if err != nil {
		// The queue's counts are still worth showing.
		_, title, _ := explain(err)
		data.ListErr = title + ": " + err.Error()
	}
	if len(ts) > size {
		ts, data.Next = ts[:size], page+1
	}
	if page > 1 {
		data.Prev = page - 1
	}
	data.Tasks = ts
	d.render(w, r, http.StatusOK, "queue", view{
		Title: name + " · " + listLabels[l], Nav: "queues", Flash: flash(r), Refresh: 5, Data: data,
	})
}

// taskData is the task page's data.
type taskData struct {
	T        errand.QueuedTask
	Name     string
	State    string
	Attempt  int
	Retries  int
	Args     []shownArg
	Headers  string
	Results  []shownArg
	Timeline []event
	Body     string
	Terminal bool
	// Progress is what the task last reported (errand.SetProgress),
	// indented JSON; "" when none.
	Progress string
	// Sig is what the server's keys make of the message's signature
	// (signatureCheck); SigNote says more.
	Sig, SigNote string
}

// signatureCheck says what the dashboard's server (its Config.Signing)
// makes of t's signature: "verified"; "failed" (a worker with these keys
// sets it aside, never running it), with the reason; "unverified" (signed
// under a key the server lacks); "" for an unsigned message a worker runs.
func signatureCheck(t errand.QueuedTask) (mark, note string) {
	switch {
	case t.SignatureError != "":
		return "failed", strings.TrimPrefix(t.SignatureError, errand.ErrBadSignature.Error()+": ")
	case t.Verified:
		return "verified", "HMAC verified under key " + strconv.Quote(t.SigningKey)
	case t.SigningKey != "":
		return "unverified", "signed with key " + strconv.Quote(t.SigningKey) + ", which the dashboard's server has no key for"
	}
	return "", ""
}

type shownArg struct {
	Name, Type, Value string
}

type event struct {
	At   time.Time
	What string
	Note string
}

func (d *Dashboard) task(w http.ResponseWriter, r *http.Request) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := d.call(r)
	defer cancel()
	if !d.knownQueue(ctx, w, r, queue) {
		return
	}
	t, err := d.srv.Task(ctx, queue, id)
	if err != nil {
		d.failWith(w, r, err, "queues/"+pathEscape(queue), "queue "+queue)
		return
	}
	if t.State == nil {
		// Server.Task may leave the backend's record out; read it here.
		uuid := t.ID
		if t.Signature != nil {
			uuid = t.Signature.UUID
		}
		if st, err := d.srv.Backend().GetState(ctx, uuid); err == nil {
			t.State = st
		} else if !errors.Is(err, errand.ErrTaskNotFound) {
			d.failWith(w, r, err, "queues/"+pathEscape(queue), "queue "+queue)
			return
		}
	}
	data := describe(t)
	refresh := 0
	if !data.Terminal && t.List != errand.ListArchived {
		refresh = 2
	}
	d.render(w, r, http.StatusOK, "task", view{
		Title: "Task " + id, Nav: "queues", Flash: flash(r), Refresh: refresh, Data: data,
	})
}

// describe lays out t for the task page.
func describe(t errand.QueuedTask) taskData {
	data := taskData{T: t, Name: t.TaskName()}
	data.Sig, data.SigNote = signatureCheck(t)
	if sig := t.Signature; sig != nil {
		data.Attempt = max(sig.Attempt, 1)
		data.Retries = sig.RetryCount
		for i, a := range sig.Args {
			name := a.Name
			if name == "" {
				name = "#" + strconv.Itoa(i+1)
			}
			data.Args = append(data.Args, shownArg{Name: name, Type: a.Type, Value: pretty(a.Value)})
		}
		if len(sig.Headers) > 0 {
			data.Headers = pretty(sig.Headers)
		}
		if sig.ETA != nil {
			data.Timeline = append(data.Timeline, event{At: *sig.ETA, What: "due", Note: "its ETA"})
		}
	} else {
		data.Body = string(t.Message.Body)
	}
	if st := t.State; st != nil {
		data.State = string(st.State)
		data.Terminal = st.State.Terminal()
		if len(st.Progress) > 0 {
			data.Progress = pretty(st.Progress)
		}
		if data.Name == "" {
			data.Name = st.TaskName
		}
		if st.Attempt > 0 {
			data.Attempt = st.Attempt
		}
		for i, res := range st.Results {
			data.Results = append(data.Results, shownArg{Name: "#" + strconv.Itoa(i+1), Type: res.Type, Value: pretty(res.Value)})
		}
		data.Timeline = append(data.Timeline, event{At: st.CreatedAt, What: "sent", Note: "state recorded PENDING"})
		if !st.StartedAt.IsZero() {
			data.Timeline = append(data.Timeline, event{At: st.StartedAt, What: "started", Note: "attempt " + strconv.Itoa(max(st.Attempt, 1))})
		}
		if !st.FinishedAt.IsZero() {
			what := "finished"
			if st.State == errand.StateCancelled {
				what = "cancelled"
			}
			data.Timeline = append(data.Timeline, event{At: st.FinishedAt, What: what, Note: string(st.State)})
		}
	}
	switch t.List {
	case errand.ListArchived:
		if a := t.Archive; a != nil {
			data.Timeline = append(data.Timeline, event{At: a.At, What: "archived", Note: a.Reason})
		}
	case errand.ListCompleted:
		data.Timeline = append(data.Timeline, event{At: t.At, What: "acked", Note: "removed from the queue"})
	case errand.ListScheduled, errand.ListRetrying:
		if !t.At.IsZero() {
			data.Timeline = append(data.Timeline, event{At: t.At, What: "due", Note: "next delivery"})
		}
	}
	data.Timeline = slices.DeleteFunc(data.Timeline, func(e event) bool { return e.At.IsZero() })
	slices.SortStableFunc(data.Timeline, func(a, b event) int { return a.At.Compare(b.At) })
	return data
}

// pretty writes v as indented JSON (raw JSON as it is, indented).
func pretty(v any) string {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "(" + err.Error() + ")"
		}
		raw = b
	}
	out := raw
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") == nil {
		out = buf.Bytes()
	}
	const max = 64 << 10
	if len(out) > max {
		return string(out[:max]) + "\n… (" + strconv.Itoa(len(out)) + " bytes in all)"
	}
	return string(out)
}

type workersData struct {
	Workers []errand.WorkerInfo
	Now     time.Time
}

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.call(r)
	defer cancel()
	ws, err := d.srv.Workers(ctx)
	if err != nil {
		d.failWith(w, r, err, "", "")
		return
	}
	d.render(w, r, http.StatusOK, "workers", view{
		Title: "Workers", Nav: "workers", Flash: flash(r), Refresh: 5, Data: workersData{Workers: ws, Now: time.Now()},
	})
}

// apiQueue is one queue in /api/queues.
type apiQueue struct {
	Name      string   `json:"name"`
	Paused    bool     `json:"paused"`
	Pending   int      `json:"pending"`
	Scheduled int      `json:"scheduled"`
	Retrying  *int     `json:"retrying"` // null when not split from scheduled
	InFlight  int      `json:"in_flight"`
	Archived  int      `json:"archived"`
	Dead      int      `json:"dead"`
	Completed int64    `json:"completed"`
	PerMinute *float64 `json:"per_minute"` // null before two samples
}

func (d *Dashboard) apiQueues(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.call(r)
	defer cancel()
	qs, err := d.srv.Queues(ctx)
	if err != nil {
		d.jsonError(w, r, err)
		return
	}
	rates := d.latestRates()
	out := make([]apiQueue, 0, len(qs))
	for _, q := range qs {
		row := d.row(ctx, q, rates)
		a := apiQueue{
			Name: q.Name, Paused: q.Paused, Pending: q.Stats.Pending, Scheduled: row.Scheduled,
			InFlight: q.Stats.InFlight, Archived: q.Archived, Dead: q.Stats.Dead, Completed: q.Stats.Completed,
		}
		if row.Split {
			a.Retrying = &row.Retrying
		}
		if rate, ok := rates[q.Name]; ok {
			a.PerMinute = &rate
		}
		out = append(out, a)
	}
	d.writeJSON(w, r, out)
}

func (d *Dashboard) apiWorkers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.call(r)
	defer cancel()
	ws, err := d.srv.Workers(ctx)
	if err != nil {
		d.jsonError(w, r, err)
		return
	}
	if ws == nil {
		ws = []errand.WorkerInfo{}
	}
	d.writeJSON(w, r, ws)
}

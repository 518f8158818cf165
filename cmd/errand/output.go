package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/errand-go/errand"
)

// What the commands print: tables for people (text/tabwriter), JSON for
// scripts (-o json; the views below are its stable shape).

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
}

// queueJSON is one queue in JSON.
type queueJSON struct {
	Name      string `json:"name"`
	Paused    bool   `json:"paused"`
	Pending   int    `json:"pending"`
	Delayed   int    `json:"delayed"` // scheduled and retrying
	InFlight  int    `json:"inflight"`
	Archived  int    `json:"archived"`
	Dead      int    `json:"dead"`
	Completed int64  `json:"completed"`
}

func queueView(q errand.QueueInfo) queueJSON {
	return queueJSON{Name: q.Name, Paused: q.Paused, Pending: q.Stats.Pending, Delayed: q.Stats.Delayed,
		InFlight: q.Stats.InFlight, Archived: q.Archived, Dead: q.Stats.Dead, Completed: q.Stats.Completed}
}

func (c *cli) printQueues(qs []errand.QueueInfo) error {
	if c.json() {
		out := make([]queueJSON, len(qs))
		for i, q := range qs {
			out[i] = queueView(q)
		}
		return c.printJSON(out)
	}
	tw := c.table()
	fmt.Fprintln(tw, "QUEUE\tPAUSED\tPENDING\tDELAYED\tINFLIGHT\tARCHIVED\tDEAD\tCOMPLETED")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", q.Name, yesNo(q.Paused), q.Stats.Pending, q.Stats.Delayed,
			q.Stats.InFlight, q.Archived, q.Stats.Dead, q.Stats.Completed)
	}
	return tw.Flush()
}

func (c *cli) printStats(qs []errand.QueueInfo) error {
	tw := c.table()
	for i, q := range qs {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "queue\t%s\n", q.Name)
		fmt.Fprintf(tw, "paused\t%s\n", yesNo(q.Paused))
		fmt.Fprintf(tw, "pending\t%d\tdue, waiting for a worker\n", q.Stats.Pending)
		fmt.Fprintf(tw, "delayed\t%d\tscheduled, and retries waiting for their time\n", q.Stats.Delayed)
		fmt.Fprintf(tw, "inflight\t%d\trunning on a worker\n", q.Stats.InFlight)
		fmt.Fprintf(tw, "archived\t%d\tfailed for good, kept in the archive\n", q.Archived)
		fmt.Fprintf(tw, "dead\t%d\tset aside by the broker (archived included)\n", q.Stats.Dead)
		fmt.Fprintf(tw, "completed\t%d\tacks since the queue began\n", q.Stats.Completed)
	}
	return tw.Flush()
}

// taskJSON is one task in JSON.
type taskJSON struct {
	ID          string            `json:"id"`
	Queue       string            `json:"queue,omitempty"`
	List        string            `json:"list,omitempty"`
	Name        string            `json:"name,omitempty"`
	Args        []argView         `json:"args,omitempty"`
	Attempt     int               `json:"attempt,omitempty"`
	RetryCount  int               `json:"retry_count,omitempty"`
	ETA         *time.Time        `json:"eta,omitempty"`
	Headers     errand.Headers    `json:"headers,omitempty"`
	DecodeError string            `json:"decode_error,omitempty"`
	Signature   *signatureJSON    `json:"signature,omitempty"` // signed messages (and unsigned ones a worker would refuse)
	At          *time.Time        `json:"at,omitempty"`        // due (scheduled, retrying), acked (completed), archived (archived)
	Archive     *archiveJSON      `json:"archive,omitempty"`
	State       *errand.TaskState `json:"state,omitempty"`
}

// argView is one argument in JSON: its value, and its Go type name when
// the producer sent one.
type argView struct {
	Name  string `json:"name,omitempty"`
	Type  string `json:"type,omitempty"`
	Value any    `json:"value"`
}

// signatureJSON is what the command's keys make of a message's signature
// (errand.QueuedTask's SigningKey, Verified, SignatureError).
type signatureJSON struct {
	Key      string `json:"key,omitempty"`   // the key id the message names
	Verified bool   `json:"verified"`        // its MAC verified under the key of that id
	Error    string `json:"error,omitempty"` // why a worker with these keys would set it aside
}

type archiveJSON struct {
	Reason   string    `json:"reason"`
	Error    string    `json:"error"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

func taskView(t errand.QueuedTask) taskJSON {
	v := taskJSON{ID: t.ID, Queue: t.Queue, List: string(t.List), DecodeError: t.DecodeError, State: t.State}
	if t.SigningKey != "" || t.SignatureError != "" {
		v.Signature = &signatureJSON{Key: t.SigningKey, Verified: t.Verified, Error: t.SignatureError}
	}
	if s := t.Signature; s != nil {
		v.Name, v.Attempt, v.RetryCount, v.ETA, v.Headers = s.Name, max(s.Attempt, 1), s.RetryCount, s.ETA, s.Headers
		for _, a := range s.Args {
			v.Args = append(v.Args, argView(a))
		}
	} else if t.State != nil {
		v.Name = t.State.TaskName
	}
	if !t.At.IsZero() {
		at := t.At
		v.At = &at
	}
	if a := t.Archive; a != nil {
		v.Archive = &archiveJSON{Reason: a.Reason, Error: a.Error, Attempts: a.Attempts, At: a.At}
	}
	return v
}

func taskViews(ts []errand.QueuedTask) []taskJSON {
	out := make([]taskJSON, len(ts))
	for i, t := range ts {
		out[i] = taskView(t)
	}
	return out
}

// atHeader names the At column of list l; "" when l has none.
func atHeader(l errand.ListState) string {
	switch l {
	case errand.ListScheduled, errand.ListRetrying:
		return "DUE"
	case errand.ListCompleted:
		return "ACKED"
	case errand.ListArchived:
		return "ARCHIVED"
	}
	return ""
}

func (c *cli) printTasks(l errand.ListState, ts []errand.QueuedTask) {
	tw := c.table()
	at := atHeader(l)
	head := "ID\tNAME\tARGS\tATTEMPT\tSTATE"
	if at != "" {
		head += "\t" + at
	}
	if l == errand.ListArchived {
		head += "\tREASON\tERROR"
	}
	// PROGRESS follows STATE when a task of the page reported progress.
	progress := slices.ContainsFunc(ts, func(t errand.QueuedTask) bool { return t.State != nil && len(t.State.Progress) > 0 })
	if progress {
		head = strings.Replace(head, "STATE", "STATE\tPROGRESS", 1)
	}
	signed := slices.ContainsFunc(ts, func(t errand.QueuedTask) bool { return t.SigningKey != "" || t.SignatureError != "" })
	if signed {
		head += "\tSIGNATURE"
	}
	fmt.Fprintln(tw, head)
	failed, unverified := 0, 0
	for _, t := range ts {
		v := taskView(t)
		row := []string{t.ID, orDash(v.Name), clip(argsText(v.Args), 40), strconv.Itoa(v.Attempt), stateText(t)}
		if v.Attempt == 0 {
			row[3] = "-"
		}
		if progress {
			row = append(row, clip(orDash(progressText(t.State)), 30))
		}
		if at != "" {
			row = append(row, timeText(t.At))
		}
		if a := t.Archive; a != nil {
			row[3] = strconv.Itoa(a.Attempts)
			row = append(row, orDash(a.Reason), clip(oneLineText(a.Error), 60))
		}
		if signed {
			mark := signatureMark(t)
			switch mark {
			case "FAILED":
				failed++
			case "unverified":
				unverified++
			}
			row = append(row, mark)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if failed > 0 {
		fmt.Fprintf(c.stderr, "%d tasks whose signature does not verify: a worker with these keys sets them aside (errand show ID says why)\n", failed)
	}
	if unverified > 0 {
		fmt.Fprintf(c.stderr, "%d signed tasks not verified: %s\n", unverified, c.noKeyText())
	}
}

// signatureMark is the SIGNATURE column of a task: verified, FAILED (a
// worker with these keys sets it aside), unverified (signed under a key
// the command was not given), or - (unsigned).
func signatureMark(t errand.QueuedTask) string {
	switch {
	case t.SignatureError != "":
		return "FAILED"
	case t.Verified:
		return "verified"
	case t.SigningKey != "":
		return "unverified"
	}
	return "-"
}

// signatureText says, on one line, what the command's keys make of t's
// signature; "" for an unsigned message a worker would run.
func (c *cli) signatureText(t errand.QueuedTask) string {
	switch {
	case t.SignatureError != "":
		why := strings.TrimPrefix(oneLineText(t.SignatureError), errand.ErrBadSignature.Error()+": ")
		return "FAILED: " + why + "; a worker with these keys sets it aside and never runs it"
	case t.Verified:
		return fmt.Sprintf("verified (key %q)", t.SigningKey)
	case t.SigningKey != "":
		return fmt.Sprintf("not verified: signed with key %q; %s", t.SigningKey, c.noKeyText())
	}
	return ""
}

// noKeyText says why a signed message was not verified.
func (c *cli) noKeyText() string {
	if c.keys {
		return "its key is not among the keys given"
	}
	return "give the signing keys (" + keysHint + ") to verify"
}

func (c *cli) printTask(t errand.QueuedTask) {
	v := taskView(t)
	tw := c.table()
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	line("id", "%s", t.ID)
	line("queue", "%s", orDash(t.Queue))
	if t.List != "" {
		line("list", "%s", t.List)
	} else {
		line("list", "- (no list of the queue holds it; the backend's record follows)")
	}
	line("name", "%s", orDash(v.Name))
	if t.Signature != nil {
		line("args", "%s", argsText(v.Args))
		line("attempt", "%d (retries allowed: %d)", v.Attempt, v.RetryCount)
		if v.ETA != nil {
			line("eta", "%s", timeText(*v.ETA))
		}
		for k, h := range v.Headers {
			line("header", "%s=%v", k, h)
		}
	}
	if sig := c.signatureText(t); sig != "" {
		line("signature", "%s", sig)
	}
	if t.DecodeError != "" {
		line("undecodable", "%s", oneLineText(t.DecodeError))
	}
	if h := atHeader(t.List); h != "" && !t.At.IsZero() {
		line(strings.ToLower(h), "%s", timeText(t.At))
	}
	if a := t.Archive; a != nil {
		line("reason", "%s", a.Reason)
		line("attempts", "%d", a.Attempts)
		line("error", "%s", oneLineText(a.Error))
	}
	if st := t.State; st != nil {
		line("state", "%s%s", st.State, cancelledNote(t))
		if p := progressText(st); p != "" {
			line("progress", "%s", p)
		}
		if st.Error != "" && (t.Archive == nil || st.Error != t.Archive.Error) {
			line("state error", "%s", oneLineText(st.Error))
		}
		if len(st.Results) > 0 {
			rs := make([]string, len(st.Results))
			for i, r := range st.Results {
				rs[i] = string(r.Value)
			}
			line("results", "%s", strings.Join(rs, ", "))
		}
		line("created", "%s", timeText(st.CreatedAt))
		if !st.StartedAt.IsZero() {
			line("started", "%s", timeText(st.StartedAt))
		}
		if !st.FinishedAt.IsZero() {
			line("finished", "%s", timeText(st.FinishedAt))
		}
	} else {
		line("state", "- (the backend has no record: expired, or never recorded)")
	}
	tw.Flush()
}

func (c *cli) printWorkers(ws []errand.WorkerInfo) {
	tw := c.table()
	fmt.Fprintln(tw, "WORKER\tHOST\tPID\tQUEUES\tBUSY\tSTARTED\tLAST BEAT")
	var running []errand.RunningTask
	var runningOn []string
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d/%d\t%s\t%s\n", w.ID, w.Host, w.PID, strings.Join(w.Queues, ","),
			len(w.Running), w.Concurrency, timeText(w.StartedAt), timeText(w.BeatAt))
		for _, r := range w.Running {
			running = append(running, r)
			runningOn = append(runningOn, w.ID)
		}
	}
	if len(running) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "RUNNING\tNAME\tQUEUE\tWORKER\tSTARTED")
		for i, r := range running {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.UUID, r.Name, r.Queue, runningOn[i], timeText(r.StartedAt))
		}
	}
	tw.Flush()
}

// progressText is the progress st's task last reported (errand.SetProgress),
// as compact JSON; "" when it reported none.
func progressText(st *errand.TaskState) string {
	if st == nil || len(st.Progress) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, st.Progress); err != nil {
		return oneLineText(string(st.Progress))
	}
	return buf.String()
}

// cancelledNote says, after the state CANCELLED of a task a list of its
// queue still holds, what becomes of its message; "" otherwise.
func cancelledNote(t errand.QueuedTask) string {
	if t.State == nil || t.State.State != errand.StateCancelled {
		return ""
	}
	switch t.List {
	case errand.ListPending, errand.ListScheduled, errand.ListRetrying:
		return " (a worker that takes its message acks it without running it)"
	case errand.ListInFlight:
		return " (its worker cancels its ctx and records nothing more)"
	}
	return ""
}

func stateText(t errand.QueuedTask) string {
	if t.State == nil {
		return "-"
	}
	return string(t.State.State)
}

// argsText shows arguments as their JSON values.
func argsText(args []argView) string {
	parts := make([]string, len(args))
	for i, a := range args {
		b, err := json.Marshal(a.Value)
		if err != nil {
			b = []byte("?")
		}
		parts[i] = string(b)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	s := t.Local().Format("2006-01-02 15:04:05")
	if d := time.Until(t).Round(time.Second); d > 0 {
		s += " (in " + d.String() + ")"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLineText(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/errand-go/errand"
)

// The actions, each a POST form. protect has already checked
// authentication, the read-only switch and the request's origin. Each
// answers 303 See Other to the page to show next, with ?done= naming what
// happened (flash turns it into a sentence), or an error page.

func pathEscape(s string) string { return url.PathEscape(s) }

// back returns where to send the browser after an action on queue: the
// overview when the form says back=overview, else the queue page (the list
// the form names in back=list:<list>).
func back(r *http.Request, queue string) string {
	switch b := r.PostFormValue("back"); b {
	case "overview":
		return ""
	case "archived", "pending", "scheduled", "retrying", "inflight", "completed":
		return "queues/" + pathEscape(queue) + "/" + b
	}
	return "queues/" + pathEscape(queue)
}

func withDone(rel, done string, n int) string {
	q := url.Values{"done": {done}}
	if n >= 0 {
		q.Set("n", strconv.Itoa(n))
	}
	return rel + "?" + q.Encode()
}

// knownQueue reports whether queue exists, answering with the error page
// (linking to the overview) when it does not or cannot be read.
func (d *Dashboard) knownQueue(ctx context.Context, w http.ResponseWriter, r *http.Request, queue string) bool {
	if _, err := d.srv.Queue(ctx, queue); err != nil {
		d.failWith(w, r, err, "", "")
		return false
	}
	return true
}

func (d *Dashboard) pause(w http.ResponseWriter, r *http.Request) {
	d.setPaused(w, r, d.srv.Pause, "paused")
}

func (d *Dashboard) resume(w http.ResponseWriter, r *http.Request) {
	d.setPaused(w, r, d.srv.Resume, "resumed")
}

// setPaused pauses or resumes the queue the path names with op; done is
// the word for what happened, in the log and the ?done= of the next page.
func (d *Dashboard) setPaused(w http.ResponseWriter, r *http.Request, op func(context.Context, string) error, done string) {
	queue := r.PathValue("queue")
	ctx, cancel := d.call(r)
	defer cancel()
	if !d.knownQueue(ctx, w, r, queue) {
		return
	}
	if err := op(ctx, queue); err != nil {
		d.failWith(w, r, err, "queues/"+pathEscape(queue), "queue "+queue)
		return
	}
	d.log.Info("web: "+done, "queue", queue)
	seeOther(w, r, withDone(back(r, queue), done, -1))
}

func (d *Dashboard) requeue(w http.ResponseWriter, r *http.Request) {
	d.onTask(w, r, func(ctx context.Context, queue, id, taskPage string) error {
		if err := d.srv.Requeue(ctx, queue, id); err != nil {
			return err
		}
		d.log.Info("web: requeued", "queue", queue, "task", id)
		seeOther(w, r, withDone(taskPage, "requeued", -1))
		return nil
	})
}

// onTask runs op on the task the path names, in a queue that exists,
// with the task's page; an error op returns is answered with the error
// page linking to the task's page, and op answers the rest.
func (d *Dashboard) onTask(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, queue, id, taskPage string) error) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := d.call(r)
	defer cancel()
	if !d.knownQueue(ctx, w, r, queue) {
		return
	}
	taskPage := "queues/" + pathEscape(queue) + "/tasks/" + pathEscape(id)
	if err := op(ctx, queue, id, taskPage); err != nil {
		d.failWith(w, r, err, taskPage, "task "+id)
	}
}

func (d *Dashboard) deleteTask(w http.ResponseWriter, r *http.Request) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := d.call(r)
	defer cancel()
	if !d.knownQueue(ctx, w, r, queue) {
		return
	}
	n, err := d.srv.DeleteArchived(ctx, queue, id)
	if err != nil {
		d.failWith(w, r, err, "queues/"+pathEscape(queue)+"/archived", "the archive of "+queue)
		return
	}
	if n == 0 {
		d.fail(w, r, http.StatusConflict, "Task not archived",
			"The archive of this queue holds no task of this ID: it may have been requeued or deleted meanwhile.", nil)
		return
	}
	d.log.Info("web: deleted archived task", "queue", queue, "task", id)
	seeOther(w, r, withDone("queues/"+pathEscape(queue)+"/archived", "deleted", n))
}

// cancelTask cancels the task the path names (errand.AsyncResult.Cancel:
// a task's UUID only, never a group's) and sends the browser back where
// the form says (back=workers, back=<list>, else the task's page), the
// outcome in ?done=.
func (d *Dashboard) cancelTask(w http.ResponseWriter, r *http.Request) {
	d.onTask(w, r, func(ctx context.Context, queue, id, taskPage string) error {
		rep, err := d.srv.Result(id).Cancel(ctx)
		if err != nil {
			return err
		}
		var done string
		switch rep.Outcome {
		case errand.CancelQueued:
			done = "cancelled"
		case errand.CancelRunning:
			done = "cancelled-running"
		case errand.CancelFinished:
			done = "already-finished"
		default:
			d.fail(w, r, http.StatusNotFound, "Task not found",
				"The result backend has no record of this task (the ID is wrong, or its record has expired), so there is nothing to cancel.", nil)
			return nil
		}
		d.log.Info("web: cancel", "queue", queue, "task", id, "outcome", string(rep.Outcome))
		next := taskPage
		switch b := r.PostFormValue("back"); b {
		case "workers":
			next = "workers"
		case "pending", "scheduled", "retrying", "inflight":
			next = "queues/" + pathEscape(queue) + "/" + b
		}
		seeOther(w, r, withDone(next, done, -1))
		return nil
	})
}

func (d *Dashboard) requeueAll(w http.ResponseWriter, r *http.Request) {
	d.onArchive(w, r, d.srv.RequeueAll, "requeued all archived tasks", "requeued")
}

func (d *Dashboard) deleteAll(w http.ResponseWriter, r *http.Request) {
	d.onArchive(w, r, d.srv.DeleteAllArchived, "deleted all archived tasks", "deleted")
}

// onArchive runs op on the archived tasks of the queue the path names (of
// the form's name, or all), logging what and answering with done and the
// count.
func (d *Dashboard) onArchive(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, queue, name string) (int, error), what, done string) {
	queue := r.PathValue("queue")
	ctx, cancel := d.call(r)
	defer cancel()
	if !d.knownQueue(ctx, w, r, queue) {
		return
	}
	n, err := op(ctx, queue, r.PostFormValue("name"))
	if err != nil {
		d.failWith(w, r, err, "queues/"+pathEscape(queue)+"/archived", "the archive of "+queue)
		return
	}
	d.log.Info("web: "+what, "queue", queue, "n", n)
	seeOther(w, r, withDone(back(r, queue), done, n))
}

// flash turns ?done= into a sentence for the page's banner. Only known
// words are shown, so a link cannot put text of its own on the page.
func flash(r *http.Request) string {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("n"))
	count := func(one, verb, what string) string {
		switch {
		case err != nil || n < 0:
			return one
		case n == 1:
			return verb + " 1 " + what + "."
		}
		return verb + " " + strconv.Itoa(n) + " " + what + "s."
	}
	switch q.Get("done") {
	case "paused":
		return "Paused: workers stop taking this queue's tasks (running tasks finish)."
	case "resumed":
		return "Resumed: workers take this queue's tasks again."
	case "requeued":
		return count("Requeued: the task is pending again, as a fresh attempt.", "Requeued", "task")
	case "deleted":
		return count("Deleted from the archive.", "Deleted", "archived task")
	case "cancelled":
		return "Cancelled: the task never starts (a worker that takes it acks it without running it)."
	case "cancelled-running":
		return "Cancelled: the task was running; its worker cancels it and records nothing more."
	case "already-finished":
		return "Nothing to cancel: the task had already finished, and its state is unchanged."
	}
	return ""
}

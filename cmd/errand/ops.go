package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/errand-go/errand"
)

// The operator commands. Each parses its flags, opens the server (see
// cli.server), checks the queue it names exists (where the broker lists
// its queues) and prints a table, or JSON with -o json.

func runQueues(c *cli, args []string) error {
	srv, err := c.serverNoArgs(args)
	if err != nil {
		return err
	}
	qs, err := srv.Queues(c.ctx)
	if err != nil {
		return err
	}
	return c.printQueues(qs)
}

// serverNoArgs parses the flags of a command that takes no arguments and
// opens the server.
func (c *cli) serverNoArgs(args []string) (*errand.Server, error) {
	pos, err := c.parse(args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageErrorf("takes no arguments, got %q", pos)
	}
	return c.server()
}

func runStats(c *cli, args []string) error {
	pos, err := c.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErrorf("takes at most one QUEUE, got %q", pos)
	}
	srv, err := c.server()
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		qi, err := c.queueInfo(srv, pos[0])
		if err != nil {
			return err
		}
		if c.json() {
			return c.printJSON(queueView(qi))
		}
		return c.printStats([]errand.QueueInfo{qi})
	}
	qs, err := srv.Queues(c.ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		// A broker that cannot list its queues: the default queue's counts.
		var qi errand.QueueInfo
		if qi, err = c.queueInfo(srv, errand.DefaultQueue); err == nil {
			qs = []errand.QueueInfo{qi}
		}
	}
	if err != nil {
		return err
	}
	if c.json() {
		return c.printQueues(qs)
	}
	return c.printStats(qs)
}

// queueInfo returns queue's info as Server.Queue answers it: a queue
// that has been used answers its counts however idle it is; a name the
// broker has never seen is an error naming the queues there are. A
// broker that does not list queues answers counts for any name.
func (c *cli) queueInfo(srv *errand.Server, queue string) (errand.QueueInfo, error) {
	qi, err := srv.Queue(c.ctx, queue)
	if !errors.Is(err, errand.ErrUnknownQueue) {
		return qi, err
	}
	qs, lerr := srv.Queues(c.ctx)
	if lerr != nil {
		return errand.QueueInfo{}, err
	}
	return errand.QueueInfo{}, unknownQueue(queue, qs)
}

// checkQueue returns an error naming the queues there are when the broker
// lists its queues and queue is not among them.
func (c *cli) checkQueue(srv *errand.Server, queue string) error {
	_, err := c.queueInfo(srv, queue)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil // neither lists nor counts: take the name as given
	}
	return err
}

func unknownQueue(queue string, qs []errand.QueueInfo) error {
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	known := "there are none yet"
	if len(names) > 0 {
		known = "known queues: " + strings.Join(names, ", ")
	}
	return tagged(errand.ErrUnknownQueue, "unknown queue %q (%s)", queue, known)
}

func runList(c *cli, args []string) error {
	fs := c.newFlags()
	queue := queueFlag(fs)
	page := fs.Int("page", 1, "the `page` to show, from 1")
	size := fs.Int("size", 20, "`tasks` per page")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one STATE (%s), got %q", listNames(), pos)
	}
	l, err := errand.ParseListState(pos[0])
	if err != nil {
		return usageErrorf("unknown state %q: want one of %s", pos[0], listNames())
	}
	if *page < 1 || *size < 1 {
		return usageErrorf("--page %d --size %d: both must be at least 1", *page, *size)
	}
	srv, err := c.server()
	if err != nil {
		return err
	}
	if err := c.checkQueue(srv, *queue); err != nil {
		return err
	}
	ts, err := srv.List(c.ctx, *queue, l, (*page-1)**size, *size)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(taskViews(ts))
	}
	c.printTasks(l, ts)
	if len(ts) == *size {
		fmt.Fprintf(c.stderr, "page %d of %s tasks of queue %q; there may be more: --page %d\n", *page, l, *queue, *page+1)
	}
	return nil
}

func listNames() string {
	ls := errand.ListStates()
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = string(l)
	}
	return strings.Join(names, ", ")
}

func runShow(c *cli, args []string) error {
	fs := c.newFlags()
	queue := queueFlag(fs)
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one task ID, got %q", pos)
	}
	id := pos[0]
	srv, err := c.server()
	if err != nil {
		return err
	}
	queues := []string{*queue}
	if !isSet(fs, "q", "queue") {
		// Look in every queue the broker knows.
		qs, err := srv.Queues(c.ctx)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
		case err != nil:
			return err
		default:
			queues = queues[:0]
			for _, q := range qs {
				queues = append(queues, q.Name)
			}
		}
	} else if err := c.checkQueue(srv, *queue); err != nil {
		return err
	}
	ti, err := findTask(c, srv, queues, id)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(taskView(ti))
	}
	c.printTask(ti)
	return nil
}

// findTask returns task id from the first of queues holding it in some
// list, or else what the backend records for it (Queue and List empty).
func findTask(c *cli, srv *errand.Server, queues []string, id string) (errand.QueuedTask, error) {
	var recorded *errand.QueuedTask
	for _, q := range queues {
		ti, err := srv.Task(c.ctx, q, id)
		if errors.Is(err, errand.ErrTaskNotFound) {
			continue
		}
		if err != nil {
			return errand.QueuedTask{}, err
		}
		if ti.List != "" {
			return withState(c, srv, ti)
		}
		if recorded == nil {
			ti.Queue = ""
			recorded = &ti
		}
	}
	if recorded != nil {
		return *recorded, nil
	}
	where := "no queue holds it"
	switch len(queues) {
	case 0:
		where = "there are no queues"
	case 1:
		where = fmt.Sprintf("queue %q does not hold it", queues[0])
	}
	return errand.QueuedTask{}, tagged(errand.ErrTaskNotFound, "task %q not found: %s and the backend has no state for it", id, where)
}

// withState adds the backend's record to ti when it lacks one. (Server.Task
// leaves QueuedTask.State unset for a task it finds in a list.)
func withState(c *cli, srv *errand.Server, ti errand.QueuedTask) (errand.QueuedTask, error) {
	if ti.State != nil {
		return ti, nil
	}
	id := ti.ID
	if ti.Signature != nil {
		id = ti.Signature.UUID
	}
	st, err := srv.Result(id).State(c.ctx)
	switch {
	case errors.Is(err, errand.ErrTaskNotFound):
	case err != nil:
		return ti, err
	default:
		ti.State = st
	}
	return ti, nil
}

// isSet reports whether any of the flags names was given.
func isSet(fs *flag.FlagSet, names ...string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || slices.Contains(names, f.Name) })
	return set
}

// archiveArgs parses the arguments of requeue and delete: IDs, --all, or
// --name NAME, exactly one of them.
func archiveArgs(c *cli, args []string) (queue string, ids []string, all bool, name string, err error) {
	fs := c.newFlags()
	q := queueFlag(fs)
	fs.BoolVar(&all, "all", false, "every archived task of the queue")
	fs.StringVar(&name, "name", "", "every archived task of the queue named `NAME`")
	ids, err = c.parseFlags(fs, args)
	if err != nil {
		return "", nil, false, "", err
	}
	modes := 0
	for _, b := range []bool{len(ids) > 0, all, name != ""} {
		if b {
			modes++
		}
	}
	if modes != 1 {
		return "", nil, false, "", usageErrorf("want task IDs, --all or --name NAME (exactly one of them)")
	}
	return *q, ids, all, name, nil
}

func runRequeue(c *cli, args []string) error {
	queue, ids, all, name, err := archiveArgs(c, args)
	if err != nil {
		return err
	}
	return c.onArchive(queue, ids, all, name, "requeued",
		func(srv *errand.Server, id string) error { return srv.Requeue(c.ctx, queue, id) },
		func(srv *errand.Server) (int, error) { return srv.RequeueAll(c.ctx, queue, name) })
}

func runDelete(c *cli, args []string) error {
	queue, ids, all, name, err := archiveArgs(c, args)
	if err != nil {
		return err
	}
	return c.onArchive(queue, ids, all, name, "deleted",
		func(srv *errand.Server, id string) error {
			n, err := srv.DeleteArchived(c.ctx, queue, id)
			if err == nil && n == 0 {
				err = errand.ErrNotArchived
			}
			return err
		},
		func(srv *errand.Server) (int, error) { return srv.DeleteAllArchived(c.ctx, queue, name) })
}

// onArchive runs one of requeue and delete: one by one for ids, else with
// every (all, or named name) archived task of queue.
func (c *cli) onArchive(queue string, ids []string, all bool, name, done string, one func(*errand.Server, string) error, every func(*errand.Server) (int, error)) error {
	srv, err := c.server()
	if err != nil {
		return err
	}
	if err := c.checkQueue(srv, queue); err != nil {
		return err
	}
	out := struct {
		Queue string   `json:"queue"`
		Name  string   `json:"name,omitempty"`
		Count int      `json:"count"`
		IDs   []string `json:"ids,omitempty"`
	}{Queue: queue, Name: name}
	var errs []error
	if len(ids) == 0 {
		// A count with an error: some were done, the rest refused for
		// their signatures (errand.Server.RequeueAll).
		out.Count, err = every(srv)
		if err != nil && (out.Count == 0 || !errors.Is(err, errand.ErrBadSignature)) {
			return c.keysHint(err)
		}
		if err != nil {
			errs = append(errs, c.keysHint(err))
		}
	}
	for _, id := range ids {
		err := one(srv, id)
		if errors.Is(err, errand.ErrNotArchived) {
			err = c.notArchived(srv, queue, id)
		}
		if err != nil {
			errs = append(errs, c.keysHint(err))
			continue
		}
		out.Count++
		out.IDs = append(out.IDs, id)
	}
	if c.json() {
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else {
		for _, id := range out.IDs {
			fmt.Fprintf(c.stdout, "%s %s\n", done, id)
		}
		what := "archived tasks"
		if name != "" {
			what = fmt.Sprintf("archived %q tasks", name)
		}
		fmt.Fprintf(c.stdout, "%s %d %s of queue %q\n", done, out.Count, what, queue)
	}
	return c.someFailed(errs, len(ids), "tasks not "+done)
}

// someFailed is the error of a command on n IDs whose failures are errs:
// none, nil; one, that error; more, each printed on stderr and an error
// counting them ("<len(errs)> of <n> <what>").
func (c *cli) someFailed(errs []error, n int, what string) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	for _, err := range errs {
		fmt.Fprintf(c.stderr, "errand %s: %s\n", c.cmd.name, oneLine(err))
	}
	return fmt.Errorf("%d of %d %s", len(errs), n, what)
}

// keysHint adds to an error about a message's signature where the
// command's signing keys come from, when it was given none.
func (c *cli) keysHint(err error) error {
	if err == nil || c.keys || !errors.Is(err, errand.ErrBadSignature) {
		return err
	}
	return fmt.Errorf("%w (no signing keys given: %s)", err, keysHint)
}

// notArchived says that task id is not in queue's archive, and where it is
// if errand knows.
func (c *cli) notArchived(srv *errand.Server, queue, id string) error {
	ti, err := srv.Task(c.ctx, queue, id)
	switch {
	case errors.Is(err, errand.ErrTaskNotFound):
		return tagged(errand.ErrTaskNotFound, "task %q not found: not in the archive of queue %q nor in its other lists, and the backend has no state for it", id, queue)
	case err == nil && ti.List != "":
		return tagged(errand.ErrNotArchived, "task %q is not in the archive of queue %q: it is %s", id, queue, ti.List)
	case err == nil && ti.State != nil:
		return tagged(errand.ErrNotArchived, "task %q is not in the archive of queue %q: its state is %s", id, queue, ti.State.State)
	}
	return tagged(errand.ErrNotArchived, "task %q is not in the archive of queue %q", id, queue)
}

// taggedError is a message of the command's own that still satisfies
// errors.Is for errand's sentinel (without repeating its text).
type taggedError struct {
	msg      string
	sentinel error
}

func (e *taggedError) Error() string { return e.msg }
func (e *taggedError) Unwrap() error { return e.sentinel }

func tagged(sentinel error, format string, a ...any) error {
	return &taggedError{msg: fmt.Sprintf(format, a...), sentinel: sentinel}
}

func runPurge(c *cli, args []string) error {
	fs := c.newFlags()
	queue := queueFlag(fs)
	var yes bool
	fs.BoolVar(&yes, "yes", false, "drop the tasks (without it, purge only says how many it would drop)")
	fs.BoolVar(&yes, "f", false, "same as --yes")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("takes no arguments (the queue is -q QUEUE), got %q", pos)
	}
	srv, err := c.server()
	if err != nil {
		return err
	}
	qi, err := c.queueInfo(srv, *queue)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	if !yes {
		if err != nil {
			return usageErrorf("would drop every pending and scheduled task of queue %q; add --yes (or -f) to drop them", *queue)
		}
		return usageErrorf("would drop %d tasks of queue %q (%d pending, %d scheduled or retrying); add --yes (or -f) to drop them",
			qi.Stats.Pending+qi.Stats.Delayed, *queue, qi.Stats.Pending, qi.Stats.Delayed)
	}
	n, err := srv.Purge(c.ctx, *queue)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(struct {
			Queue  string `json:"queue"`
			Purged int    `json:"purged"`
		}{*queue, n})
	}
	fmt.Fprintf(c.stdout, "dropped %d pending and scheduled tasks of queue %q\n", n, *queue)
	return nil
}

func runPause(c *cli, args []string) error  { return c.pause(args, true) }
func runResume(c *cli, args []string) error { return c.pause(args, false) }

func (c *cli) pause(args []string, pause bool) error {
	pos, err := c.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("want one QUEUE, got %q", pos)
	}
	queue := pos[0]
	srv, err := c.server()
	if err != nil {
		return err
	}
	if err := c.checkQueue(srv, queue); err != nil {
		return err
	}
	if pause {
		err = srv.Pause(c.ctx, queue)
	} else {
		err = srv.Resume(c.ctx, queue)
	}
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(struct {
			Queue  string `json:"queue"`
			Paused bool   `json:"paused"`
		}{queue, pause})
	}
	if pause {
		fmt.Fprintf(c.stdout, "paused queue %q: workers stop fetching its tasks (running ones finish)\n", queue)
	} else {
		fmt.Fprintf(c.stdout, "resumed queue %q\n", queue)
	}
	return nil
}

func runWorkers(c *cli, args []string) error {
	srv, err := c.serverNoArgs(args)
	if err != nil {
		return err
	}
	ws, err := srv.Workers(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		if ws == nil {
			ws = []errand.WorkerInfo{}
		}
		return c.printJSON(ws)
	}
	c.printWorkers(ws)
	return nil
}

func runEnqueue(c *cli, args []string) error {
	fs := c.newFlags()
	queue := queueFlag(fs)
	delay := fs.Duration("delay", 0, "run the task no sooner than this `duration` from now")
	retries := fs.Int("retries", 0, "`retries` allowed after the first attempt")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		return usageErrorf("want a task NAME and its arguments")
	}
	if *delay < 0 || *retries < 0 {
		return usageErrorf("--delay %v --retries %d: neither may be negative", *delay, *retries)
	}
	sig := errand.NewSignature(pos[0])
	for i, a := range pos[1:] {
		arg, err := parseArg(a)
		if err != nil {
			return usageErrorf("argument %d: %v", i+1, err)
		}
		sig.Args = append(sig.Args, arg)
	}
	sig.RoutingKey = *queue
	sig.RetryCount = *retries
	if *delay > 0 {
		eta := time.Now().Add(*delay)
		sig.ETA = &eta
	}
	srv, err := c.server()
	if err != nil {
		return err
	}
	if _, err := srv.SendTask(c.ctx, sig); err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(struct {
			ID    string `json:"id"`
			Name  string `json:"name"`
			Queue string `json:"queue"`
		}{sig.UUID, sig.Name, *queue})
	}
	fmt.Fprintln(c.stdout, sig.UUID)
	return nil
}

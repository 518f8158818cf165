package errand

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/portable"
)

// The operator's view of a server's queues: the archive of tasks that
// failed for good, lists by state, one task's detail, pause and resume, and
// the live workers. These are what `errand` (the command) and the web
// dashboard use. Each needs an optional capability of the broker
// (driver.Archiver, driver.Lister, driver.QueueLister, driver.Pauser,
// driver.Heartbeater) and returns an error satisfying
// errors.Is(err, errors.ErrUnsupported) when the broker lacks it.

// ListState names a list of a queue's tasks. It is the driver package's
// type: Server.List takes every list below, a driver's Lister the four
// the broker keeps (pending, scheduled, in flight, completed).
type ListState = driver.ListState

// The lists of a queue, as Server.List takes them.
const (
	ListPending   ListState = driver.ListPending   // due, waiting for a worker
	ListScheduled ListState = driver.ListScheduled // not due yet: sent with an ETA (first attempts)
	ListRetrying  ListState = "retrying"           // not due yet: a retry waiting for its time
	ListInFlight  ListState = driver.ListInFlight  // running on a worker (leased)
	ListArchived  ListState = "archived"           // failed for good, kept in the archive
	ListCompleted ListState = driver.ListCompleted // acked recently
)

// ListStates returns every list Server.List takes, in the order the
// command and the dashboard show them. Each call returns a new slice.
func ListStates() []ListState {
	return []ListState{ListPending, ListScheduled, ListRetrying, ListInFlight, ListArchived, ListCompleted}
}

// ParseListState returns the ListState named s, or an error listing the
// names there are.
func ParseListState(s string) (ListState, error) {
	for _, l := range ListStates() {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("errand: unknown list %q: want one of %v", s, ListStates())
}

// QueuedTask is one task as an operator sees it: the message on the queue,
// its decoded signature and, where the backend still has it, its state.
type QueuedTask struct {
	ID    string
	Queue string
	List  ListState
	// Message is the message as the broker holds it.
	Message Message
	// Signature is the decoded message; nil when it does not decode
	// (DecodeError says why). A signed message is decoded whether or not
	// its signature verifies: check Verified and SignatureError before
	// trusting what it says.
	Signature   *Signature
	DecodeError string
	// SigningKey is the id of the key a signed message names in its
	// signature header (see Signing); "" for an unsigned message.
	SigningKey string
	// Verified reports whether the message's MAC verified under this
	// server's key of that id (Config.Signing.Keys). False for an unsigned
	// message, and for a signed one this server has no key for.
	Verified bool
	// SignatureError says why a worker of this server (its Config.Signing)
	// would set the message aside for its signature, as the error it would
	// give (wrapping ErrBadSignature): a MAC that does not verify, a
	// malformed header, or, under Signing.Require, an unsigned message or
	// a key it does not have. Empty when such a worker would run it.
	SignatureError string
	// At is when the task is due (scheduled, retrying), was acked
	// (completed) or archived (archived); zero otherwise.
	At time.Time
	// Archive is set for archived tasks: reason, last error, attempts.
	Archive *ArchiveEntry
	// State is the backend's record of the task; nil when it has none
	// (expired, or never recorded).
	State *TaskState
}

// TaskName is the task's name, or "" when its message does not decode.
func (t *QueuedTask) TaskName() string {
	if t.Signature == nil {
		return ""
	}
	return t.Signature.Name
}

// QueueInfo describes one queue.
type QueueInfo struct {
	Name   string
	Stats  QueueStats
	Paused bool
	// Archived is the number of entries in the queue's archive (its
	// Stats.Dead, where the broker keeps an archive).
	Archived int
}

// WorkerInfo is what a live worker reports in its heartbeat.
type WorkerInfo struct {
	ID          string        `json:"id"`
	Host        string        `json:"host"`
	PID         int           `json:"pid"`
	Queues      []string      `json:"queues"`
	Concurrency int           `json:"concurrency"`
	Running     []RunningTask `json:"running"`
	StartedAt   time.Time     `json:"started_at"`
	BeatAt      time.Time     `json:"beat_at"`
}

// RunningTask is one task a worker is running.
type RunningTask struct {
	UUID      string    `json:"uuid"`
	Name      string    `json:"name"`
	Queue     string    `json:"queue"`
	StartedAt time.Time `json:"started_at"`
}

// describe decodes m into a QueuedTask of list l, with what the server's
// Signing makes of its signature (the body of a signed message is decoded
// whether or not it verifies). The broker holds
// scheduled tasks and retries in one delayed set: a scheduled message
// whose signature's Attempt is above 1 is a retry (ListRetrying).
func (s *Server) describe(m Message, l ListState, at time.Time) QueuedTask {
	ti := QueuedTask{ID: m.ID, Queue: m.Queue, List: l, Message: m, At: at}
	body, key, verified, serr := s.cfg.Signing.inspect(m.Body)
	ti.SigningKey, ti.Verified = key, verified
	if serr != nil {
		ti.SignatureError = serr.Error()
	}
	if body == nil {
		ti.DecodeError = ti.SignatureError // a header without a body
	} else if sig, err := DecodeSignature(body); err != nil {
		ti.DecodeError = err.Error()
	} else {
		ti.Signature = sig
	}
	if l == ListScheduled && ti.Signature != nil && ti.Signature.Attempt > 1 {
		ti.List = ListRetrying
	}
	return ti
}

// withState returns ti with the backend's state, where it has one.
func (s *Server) withState(ctx context.Context, ti QueuedTask) (QueuedTask, error) {
	ts := []QueuedTask{ti}
	err := s.withStates(ctx, ts)
	return ts[0], err
}

// withStates adds the backend's state to each of ts that has one.
func (s *Server) withStates(ctx context.Context, ts []QueuedTask) error {
	for i := range ts {
		id := ts[i].ID
		if ts[i].Signature != nil {
			id = ts[i].Signature.UUID
		}
		st, err := s.backend.GetState(ctx, id)
		switch {
		case errors.Is(err, ErrTaskNotFound):
		case err != nil:
			return err
		default:
			ts[i].State = st
		}
	}
	return nil
}

// Queues lists the broker's queues with their counts and whether each is
// paused.
func (s *Server) Queues(ctx context.Context) ([]QueueInfo, error) {
	pb, ql, err := portable.Capability[driver.QueueLister](ctx, s.broker, "listing queues")
	if err != nil {
		return nil, err
	}
	names, err := ql.Queues(ctx)
	if err != nil {
		return nil, pb.After(ctx, err)
	}
	slices.Sort(names)
	var paused []string
	if p := pb.Can.Pauser; p != nil {
		if paused, err = p.Paused(ctx); err != nil {
			return nil, pb.After(ctx, err)
		}
	}
	out := make([]QueueInfo, 0, len(names))
	for _, n := range names {
		qi := QueueInfo{Name: n, Paused: slices.Contains(paused, n)}
		if sr := pb.Can.Stats; sr != nil {
			if qi.Stats, err = sr.Stats(ctx, n); err != nil {
				return nil, pb.After(ctx, err)
			}
		}
		qi.Archived = qi.Stats.Dead
		out = append(out, qi)
	}
	return out, nil
}

// Queue returns one queue's info: its counts (driver.StatsReporter),
// whether it is paused (driver.Pauser) and the size of its archive. One
// rule on every broker: a queue that has been used answers its counts,
// however long it has been idle; a name the broker has never seen
// returns an error satisfying errors.Is(err, ErrUnknownQueue) that names
// the queues there are. The broker tells which is which: a
// driver.QueueKnower by KnowsQueue (Redis, whose listing leaves idle
// queues out), another driver.QueueLister by listing the name. A broker
// that does not list queues cannot tell a name never used from an empty
// queue: it answers counts (zeros) for any name. A broker with neither
// counts nor a list returns an error satisfying errors.Is(err,
// errors.ErrUnsupported).
func (s *Server) Queue(ctx context.Context, queue string) (QueueInfo, error) {
	pb := s.broker
	if err := pb.Before(ctx); err != nil {
		return QueueInfo{}, err
	}
	ql, sr := pb.Can.Queues, pb.Can.Stats
	if ql == nil && sr == nil {
		return QueueInfo{}, portable.Unsupported("queue stats", pb.Drv)
	}
	if err := s.knownQueue(ctx, queue); err != nil {
		return QueueInfo{}, err
	}
	qi := QueueInfo{Name: queue}
	if sr != nil {
		st, err := sr.Stats(ctx, queue)
		if err != nil {
			return QueueInfo{}, pb.After(ctx, err)
		}
		qi.Stats, qi.Archived = st, st.Dead
	}
	if p := pb.Can.Pauser; p != nil {
		paused, err := p.Paused(ctx)
		if err != nil {
			return QueueInfo{}, pb.After(ctx, err)
		}
		qi.Paused = slices.Contains(paused, queue)
	}
	return qi, nil
}

// knownQueue returns nil when the broker knows queue (see Queue), an
// error satisfying errors.Is(err, ErrUnknownQueue) naming the queues
// there are when it does not, and nil for any name on a broker that does
// not list queues.
func (s *Server) knownQueue(ctx context.Context, queue string) error {
	pb := s.broker
	ql, k := pb.Can.Queues, pb.Can.Knower
	if ql == nil && k == nil {
		return nil // cannot tell: counts for any name
	}
	var (
		known bool
		names []string
		err   error
	)
	if k != nil {
		known, err = k.KnowsQueue(ctx, queue)
	}
	if err == nil && !known && ql != nil {
		// Listed is known (a KnowsQueue racing a first publish); the list
		// names the queues there are in the error.
		names, err = ql.Queues(ctx)
		known = slices.Contains(names, queue)
	}
	switch {
	case err != nil:
		return pb.After(ctx, err)
	case known:
		return nil
	}
	slices.Sort(names)
	return fmt.Errorf("errand: unknown queue %q (queues: %v): %w", queue, names, ErrUnknownQueue)
}

// Purge drops every pending and scheduled (delayed, retrying) task of
// queue and returns how many it dropped. Tasks in flight, completed and
// archived are kept. It needs driver.Purger and returns an error
// satisfying errors.Is(err, errors.ErrUnsupported) without it.
func (s *Server) Purge(ctx context.Context, queue string) (int, error) {
	pb, p, err := portable.Capability[driver.Purger](ctx, s.broker, "purge")
	if err != nil {
		return 0, err
	}
	n, err := p.Purge(ctx, queue)
	return n, pb.After(ctx, err)
}

// ErrUnknownQueue is returned for a queue the broker does not know.
var ErrUnknownQueue = errors.New("errand: unknown queue")

// scanPage is how many messages List asks the driver for at a time when
// it filters (retrying, scheduled).
const scanPage = 500

// List returns up to limit tasks of queue in list l, skipping the first
// offset, each with its backend state.
func (s *Server) List(ctx context.Context, queue string, l ListState, offset, limit int) ([]QueuedTask, error) {
	if offset < 0 || limit < 1 {
		return nil, fmt.Errorf("errand: List: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	var out []QueuedTask
	switch l {
	case ListArchived:
		pb, a, err := portable.Capability[driver.Archiver](ctx, s.broker, "the archive")
		if err != nil {
			return nil, err
		}
		es, err := a.Archived(ctx, queue, offset, limit)
		if err != nil {
			return nil, pb.After(ctx, err)
		}
		for _, e := range es {
			ti := s.describe(e.Message, l, e.At)
			ti.Archive = &e
			out = append(out, ti)
		}
	case ListPending, ListInFlight, ListCompleted:
		pb, ls, err := portable.Capability[driver.Lister](ctx, s.broker, "listing by state")
		if err != nil {
			return nil, err
		}
		ms, err := ls.List(ctx, queue, l, offset, limit)
		if err != nil {
			return nil, pb.After(ctx, err)
		}
		for _, m := range ms {
			out = append(out, s.describe(m.Message, l, m.At))
		}
	case ListScheduled, ListRetrying:
		// One delayed set holds both (see describe).
		pb, ls, err := portable.Capability[driver.Lister](ctx, s.broker, "listing by state")
		if err != nil {
			return nil, err
		}
		skip := offset
		for from := 0; len(out) < limit; from += scanPage {
			ms, err := ls.List(ctx, queue, driver.ListScheduled, from, scanPage)
			if err != nil {
				return nil, pb.After(ctx, err)
			}
			for _, m := range ms {
				ti := s.describe(m.Message, ListScheduled, m.At)
				if ti.List != l {
					continue
				}
				if skip > 0 {
					skip--
					continue
				}
				if len(out) < limit {
					out = append(out, ti)
				}
			}
			if len(ms) < scanPage {
				break
			}
		}
	default:
		return nil, fmt.Errorf("errand: unknown list %q: want one of %v", l, ListStates())
	}
	if err := s.withStates(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// findLimit bounds how many messages Task looks through per list.
const findLimit = 100_000

// Task returns what errand knows about task id on queue: the message where
// some list of the queue holds it (archived first, then in flight, pending,
// scheduled and retrying, completed), and the backend's state. On a broker
// that finds a message by ID (driver.Finder) that is one call; otherwise
// Task pages through each list (up to 100 000 messages per list). It returns
// an error satisfying errors.Is(err, ErrTaskNotFound) when neither the
// queue's lists nor the backend know id.
func (s *Server) Task(ctx context.Context, queue, id string) (QueuedTask, error) {
	if s.broker.Can.Archiver != nil {
		ti, err := s.ArchivedTask(ctx, queue, id)
		if err == nil {
			return ti, nil
		}
		if !errors.Is(err, ErrNotArchived) {
			return QueuedTask{}, err
		}
	}
	found := func(m driver.Listed, l driver.ListState) (QueuedTask, error) {
		return s.withState(ctx, s.describe(m.Message, l, m.At))
	}
	if err := s.broker.Before(ctx); err != nil {
		return QueuedTask{}, err
	}
	if f := s.broker.Can.Finder; f != nil {
		m, l, ok, err := f.Find(ctx, queue, id)
		if err != nil {
			return QueuedTask{}, s.broker.After(ctx, err)
		}
		if ok {
			return found(m, l)
		}
	} else if ls := s.broker.Can.Lister; ls != nil {
		for _, l := range []driver.ListState{driver.ListInFlight, driver.ListPending, driver.ListScheduled, driver.ListCompleted} {
			for from := 0; from < findLimit; from += scanPage {
				ms, err := ls.List(ctx, queue, l, from, scanPage)
				if err != nil {
					return QueuedTask{}, s.broker.After(ctx, err)
				}
				for _, m := range ms {
					if m.ID == id {
						return found(m, l)
					}
				}
				if len(ms) < scanPage {
					break
				}
			}
		}
	}
	st, err := s.backend.GetState(ctx, id)
	if err != nil {
		return QueuedTask{}, fmt.Errorf("errand: task %q: not on queue %q, and the backend says: %w", id, queue, err)
	}
	return QueuedTask{ID: id, Queue: queue, State: st}, nil
}

// ArchivedTask returns the archived task id of queue, or an error
// satisfying errors.Is(err, ErrNotArchived).
func (s *Server) ArchivedTask(ctx context.Context, queue, id string) (QueuedTask, error) {
	pb, a, err := portable.Capability[driver.Archiver](ctx, s.broker, "the archive")
	if err != nil {
		return QueuedTask{}, err
	}
	e, err := a.ArchivedEntry(ctx, queue, id)
	if err != nil {
		return QueuedTask{}, fmt.Errorf("errand: task %q in the archive of queue %q: %w", id, queue, pb.After(ctx, err))
	}
	ti := s.describe(e.Message, ListArchived, e.At)
	ti.Archive = &e
	return s.withState(ctx, ti)
}

// Requeue sends the archived task id of queue again as a fresh attempt
// (Attempt 1, no ETA, its state PENDING) and removes it from the archive,
// atomically on the broker: two operators requeueing at once send it once
// (the other gets ErrNotArchived). A message that does not decode is
// requeued as it is; one whose archive entry keeps only the start of its
// body (ArchiveEntry.Size) is refused.
//
// A requeue never signs what this server could not verify. A message whose
// signature verified is signed again (under Signing.SignWith, or the key it
// was signed with when SignWith is empty); a message that came unsigned is
// requeued unsigned, whatever SignWith says. Requeue refuses, with an error
// wrapping ErrBadSignature, a message a worker of this server would set
// aside for its signature (QueuedTask.SignatureError), and a signed message
// under a key this server does not have (it would go out unsigned).
//
// PENDING is recorded before the broker step, so a result handle waits
// for the new outcome. If that step fails, the previous state is put
// back; if another operator's requeue of the same task won the race, this
// one's PENDING may land after that run's first state, and the next state
// the run records replaces it (only a run that ends within the few
// milliseconds between this call's reads and its write can be left showing
// PENDING).
func (s *Server) Requeue(ctx context.Context, queue, id string) error {
	ctx = noTx(ctx) // an operator's call: never inside a caller's transaction
	pb, a, err := portable.Capability[driver.Archiver](ctx, s.broker, "the archive")
	if err != nil {
		return err
	}
	e, err := a.ArchivedEntry(ctx, queue, id)
	if err != nil {
		return fmt.Errorf("errand: requeue %q of queue %q: %w", id, queue, pb.After(ctx, err))
	}
	if e.Size > len(e.Body) {
		return fmt.Errorf("errand: requeue %q of queue %q: %w: the archive keeps only the first %d bytes of its body of %d bytes (set aside for its size), and a requeue would send a truncated message (delete it instead)", id, queue, errPartialBody, len(e.Body), e.Size)
	}
	m := e.Message
	m.NotBefore = time.Time{}
	ti := s.describe(e.Message, ListArchived, e.At)
	if _, _, _, serr := s.cfg.Signing.inspect(e.Message.Body); serr != nil {
		return fmt.Errorf("errand: requeue %q of queue %q: %w (a worker would set it aside again; delete it instead)", id, queue, serr)
	}
	if ti.Signature != nil && ti.SigningKey != "" && !ti.Verified {
		return fmt.Errorf("errand: requeue %q of queue %q: %w: signed with key %q, which this server does not have: a requeue encodes the message again, and would send it unsigned (give the server the key, Config.Signing)", id, queue, ErrBadSignature, ti.SigningKey)
	}
	var prev *TaskState
	if sig := ti.Signature; sig != nil {
		sig.Attempt, sig.ETA = 1, nil
		sig.RetryTimeout = 0
		sg := s.cfg.Signing
		if ti.SigningKey == "" {
			// It came unsigned: it goes back unsigned. Signing it here would
			// vouch for a message nobody verified (a forged one a worker
			// with Signing.Require set aside would then run).
			sg = nil
		} else if ti.Verified && sg.SignWith == "" {
			// Keep the signature: sign it again under the key it verified under.
			again := *sg
			again.SignWith = ti.SigningKey
			sg = &again
		}
		if m, err = s.messageSignedBy(sig, sg); err != nil {
			return fmt.Errorf("errand: requeue %q of queue %q: %w", id, queue, err)
		}
		if prev, err = s.backend.GetState(ctx, sig.UUID); err != nil && !errors.Is(err, ErrTaskNotFound) {
			return fmt.Errorf("errand: requeue %q of queue %q: read state: %w", id, queue, err)
		}
		if err := s.setPending(ctx, sig); err != nil {
			return fmt.Errorf("errand: requeue %q of queue %q: set PENDING: %w", id, queue, err)
		}
	}
	if err := a.Requeue(ctx, queue, id, m); err != nil {
		err = pb.After(ctx, err)
		if prev != nil && !errors.Is(err, ErrNotArchived) {
			// Nothing was sent: put the recorded state back.
			if rerr := s.backend.SetState(ctx, prev); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restore state %s: %w", prev.State, rerr))
			}
		}
		return fmt.Errorf("errand: requeue %q of queue %q: %w", id, queue, err)
	}
	return nil
}

// errPartialBody is why Requeue refuses an archive entry that keeps only
// the start of its body (ArchiveEntry.Size).
var errPartialBody = errors.New("only the start of its body was kept")

// RequeueAll requeues every archived task of queue (only those named name,
// when name is not empty) and returns how many it requeued. Tasks Requeue
// refuses for their signature (ErrBadSignature) or for a body the archive
// keeps only the start of stay in the archive, and the others are
// requeued: it then returns their count with an error (wrapping
// ErrBadSignature for the signatures) that says how many stayed and why
// the first did.
func (s *Server) RequeueAll(ctx context.Context, queue, name string) (int, error) {
	var unsigned, partial []error
	n, err := s.eachArchived(ctx, queue, name, func(ti QueuedTask) error {
		err := s.Requeue(ctx, queue, ti.ID)
		switch {
		case errors.Is(err, ErrNotArchived):
			return errSkip // requeued or deleted by someone else meanwhile
		case errors.Is(err, ErrBadSignature):
			unsigned = append(unsigned, err)
			return errSkip
		case errors.Is(err, errPartialBody):
			partial = append(partial, err)
			return errSkip
		}
		return err
	})
	if err != nil {
		return n, err
	}
	var stayed []error
	if len(unsigned) > 0 {
		stayed = append(stayed, fmt.Errorf("errand: requeue all of queue %q: %d archived tasks left in the archive for their signatures; the first: %w", queue, len(unsigned), unsigned[0]))
	}
	if len(partial) > 0 {
		stayed = append(stayed, fmt.Errorf("errand: requeue all of queue %q: %d archived tasks left in the archive, set aside for their size with only the start of their bodies kept; the first: %w", queue, len(partial), partial[0]))
	}
	return n, errors.Join(stayed...)
}

// DeleteArchived removes the archived tasks ids of queue and returns how
// many there were.
func (s *Server) DeleteArchived(ctx context.Context, queue string, ids ...string) (int, error) {
	pb, a, err := portable.Capability[driver.Archiver](ctx, s.broker, "the archive")
	if err != nil {
		return 0, err
	}
	n, err := a.DeleteArchived(ctx, queue, ids...)
	return n, pb.After(ctx, err)
}

// DeleteAllArchived removes every archived task of queue (only those named
// name, when name is not empty) and returns how many it removed.
func (s *Server) DeleteAllArchived(ctx context.Context, queue, name string) (int, error) {
	return s.eachArchived(ctx, queue, name, func(ti QueuedTask) error {
		n, err := s.DeleteArchived(ctx, queue, ti.ID)
		if err == nil && n == 0 {
			return errSkip
		}
		return err
	})
}

var errSkip = errors.New("skip")

// eachArchived calls fn for every archived task of queue named name (any
// name when empty) and counts the calls that did not return errSkip.
func (s *Server) eachArchived(ctx context.Context, queue, name string, fn func(QueuedTask) error) (int, error) {
	pb, a, err := portable.Capability[driver.Archiver](ctx, s.broker, "the archive")
	if err != nil {
		return 0, err
	}
	// Collect first: fn changes the archive under the pages.
	var todo []QueuedTask
	for from := 0; ; from += scanPage {
		es, err := a.Archived(ctx, queue, from, scanPage)
		if err != nil {
			return 0, pb.After(ctx, err)
		}
		for _, e := range es {
			ti := s.describe(e.Message, ListArchived, e.At)
			if name == "" || ti.TaskName() == name {
				todo = append(todo, ti)
			}
		}
		if len(es) < scanPage {
			break
		}
	}
	n := 0
	for _, ti := range todo {
		switch err := fn(ti); {
		case errors.Is(err, errSkip):
		case err != nil:
			return n, err
		default:
			n++
		}
	}
	return n, nil
}

// Pause stops every worker of every process from fetching queue's tasks
// (within WorkerConfig.PausePoll) until Resume. Tasks already running
// finish; nothing is lost. The flag lives on the broker's server.
func (s *Server) Pause(ctx context.Context, queue string) error {
	pb, p, err := portable.Capability[driver.Pauser](ctx, s.broker, "pausing queues")
	if err != nil {
		return err
	}
	return pb.After(ctx, p.Pause(ctx, queue))
}

// Resume lets workers fetch queue's tasks again.
func (s *Server) Resume(ctx context.Context, queue string) error {
	pb, p, err := portable.Capability[driver.Pauser](ctx, s.broker, "pausing queues")
	if err != nil {
		return err
	}
	return pb.After(ctx, p.Resume(ctx, queue))
}

// Paused returns the queues paused now.
func (s *Server) Paused(ctx context.Context) ([]string, error) {
	pb, p, err := portable.Capability[driver.Pauser](ctx, s.broker, "pausing queues")
	if err != nil {
		return nil, err
	}
	qs, err := p.Paused(ctx)
	return qs, pb.After(ctx, err)
}

// Workers returns the live workers of every process that share the
// broker, as their last heartbeats describe them, oldest first.
func (s *Server) Workers(ctx context.Context) ([]WorkerInfo, error) {
	pb, h, err := portable.Capability[driver.Heartbeater](ctx, s.broker, "worker heartbeats")
	if err != nil {
		return nil, err
	}
	beats, err := h.Beats(ctx)
	if err != nil {
		return nil, pb.After(ctx, err)
	}
	out := make([]WorkerInfo, 0, len(beats))
	for _, b := range beats {
		wi, err := decodeWorkerInfo(b)
		if err != nil {
			s.log.Warn("errand: a heartbeat that does not decode", "err", err)
			continue
		}
		out = append(out, wi)
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

package driver

import (
	"context"
	"time"
)

// The operator's capabilities: an archive of what failed for good, listing a
// queue by state, pausing a queue, and the heartbeats of live workers. Each
// is a small optional interface; errand (Server.Archived, Server.List,
// Server.Pause, Server.Workers, ...) answers errors.ErrUnsupported for a
// broker without it. The conformance kit checks each one a broker claims.

// ArchiveEntry is a message set aside for good, as the archive keeps it.
type ArchiveEntry struct {
	Message
	// Reason says why, in a few words: "retries exhausted", "permanent
	// error", "undecodable", "unknown task", "too large", ...
	Reason string
	// Error is the last error's text.
	Error string
	// Attempts is how many times the task ran (or was delivered, for a
	// message that never ran).
	Attempts int
	// At is when the message was archived.
	At time.Time
	// Size is the body's size in bytes when Body holds only its first
	// bytes (Size > len(Body)): a broker may keep or list only a bounded
	// preview of a large body (the Redis broker keeps one of a message it
	// set aside for its size, and lists one of an entry too large to list
	// whole). 0 when Body is the whole body.
	Size int
}

// Retention bounds an archive per queue. A field zero or negative means no
// bound on that side: drivers must accept both (errand passes a negative
// field through from WorkerConfig.ArchiveRetention, where 0 means the
// default).
type Retention struct {
	MaxCount int           // most entries kept; the oldest go first
	MaxAge   time.Duration // entries archived longer ago than this go
}

// Archiver is implemented by brokers that keep an archive per queue. When
// the broker is an Archiver, errand archives (instead of Reject and Ack)
// every task that ends for good without success: retries exhausted,
// permanent errors, undecodable messages, unknown task names at their
// bound.
type Archiver interface {
	// Archive removes the delivery d from its queue for good, like Reject,
	// and keeps e in the archive of d's queue (e.Message is the message to
	// keep; when e.ID is empty, d's message is kept, whatever else
	// e.Message holds; e.At is set by errand, now when zero). In
	// the same step it drops that archive's entries beyond keep: the oldest
	// past keep.MaxCount and every one archived more than keep.MaxAge ago.
	// ErrLeaseLost as Ack. Archiving an ID already archived replaces the
	// entry.
	Archive(ctx context.Context, d *Delivery, e ArchiveEntry, keep Retention) error

	// Archived returns up to limit entries of queue's archive, newest
	// first, skipping the first offset. An offset below 0 or a limit
	// below 1 is an error.
	Archived(ctx context.Context, queue string, offset, limit int) ([]ArchiveEntry, error)

	// ArchivedEntry returns the archived entry of queue whose Message.ID is
	// id, or ErrNotArchived.
	ArchivedEntry(ctx context.Context, queue, id string) (ArchiveEntry, error)

	// Requeue removes the entry id from queue's archive and publishes m in
	// one atomic step: either both happen or neither. ErrNotArchived (and
	// nothing published) when id is not in the archive, e.g. because
	// another operator requeued it first.
	Requeue(ctx context.Context, queue, id string, m Message) error

	// DeleteArchived removes the entries ids from queue's archive and
	// returns how many there were. Unknown IDs are not an error.
	DeleteArchived(ctx context.Context, queue string, ids ...string) (int, error)
}

// ListState names what Lister lists.
type ListState string

// The states a Lister lists.
const (
	ListPending   ListState = "pending"   // due, not delivered
	ListScheduled ListState = "scheduled" // not due yet (delayed, and retries waiting)
	ListInFlight  ListState = "inflight"  // delivered, lease running
	ListCompleted ListState = "completed" // acked recently (see Lister)
)

// Listed is one message in a Lister's page.
type Listed struct {
	Message
	// At is when the message was acked (ListCompleted) or is due
	// (ListScheduled); zero otherwise.
	At time.Time
}

// Lister is implemented by brokers that list a queue by state, a page at
// a time. For ListCompleted, a broker keeps the most recently acked
// messages of each queue (its own bound, documented; IDs and bodies),
// written in the same round trip as the ack.
type Lister interface {
	// List returns up to limit messages of queue in state, skipping the
	// first offset: pending and in flight in delivery order, scheduled by
	// due time, completed newest first. An unknown state, an offset below
	// 0 or a limit below 1 is an error.
	List(ctx context.Context, queue string, state ListState, offset, limit int) ([]Listed, error)
}

// QueueLister is implemented by brokers that know which queues exist: every
// queue a message was published to (and not deleted since). errand's
// Server.Queue answers ErrUnknownQueue for a name Queues does not list,
// unless the broker is a QueueKnower.
type QueueLister interface {
	Queues(ctx context.Context) ([]string, error)
}

// QueueKnower is implemented by QueueListers whose Queues leaves out
// queues that were used but hold nothing now (Redis takes an idle queue
// out of its listing), so that an operator's call for one such queue
// still answers its counts: errand's Server.Queue asks KnowsQueue instead
// of looking for the name in Queues.
type QueueKnower interface {
	// KnowsQueue reports whether queue was used — a message was published
	// to it, or a consumer fetched from it — whether or not Queues lists it
	// now; false for a name the broker has never seen (or whose data the
	// server has lost since).
	KnowsQueue(ctx context.Context, queue string) (bool, error)
}

// Pauser is implemented by brokers that can pause a queue for every
// consumer. The paused flag lives on the broker's server, so it holds
// across processes and worker restarts until Resume. Fetch is not required
// to honour it: errand's workers poll Paused and stop fetching.
type Pauser interface {
	Pause(ctx context.Context, queue string) error
	Resume(ctx context.Context, queue string) error
	// Paused returns the queues paused now (among all queues).
	Paused(ctx context.Context) ([]string, error)
}

// Heartbeater is implemented by brokers that keep a registry of live
// workers. Each entry is errand's own encoding (opaque to the driver) and
// lives ttl after its last Beat, so a worker that crashed disappears.
type Heartbeater interface {
	// Beat stores data for worker id, replacing what it had, alive for ttl.
	Beat(ctx context.Context, id string, data []byte, ttl time.Duration) error
	// Beats returns the data of every worker whose ttl has not run out.
	Beats(ctx context.Context) ([][]byte, error)
	// Unbeat removes worker id at once (a clean shutdown).
	Unbeat(ctx context.Context, id string) error
}

// Finder is implemented by brokers that find one message of a queue by its
// ID without paging through the lists (errand's Server.Task uses it, and
// pages through Lister otherwise).
type Finder interface {
	// Find returns the message of queue whose ID is id, as List would list
	// it, with the list it is on, looking in flight, then pending, then
	// scheduled, then among the completed ones List keeps; found is false
	// (and err nil) when none holds it. The archive is not searched
	// (Archiver.ArchivedEntry).
	Find(ctx context.Context, queue, id string) (l Listed, state ListState, found bool, err error)
}

package postgresbroker

import (
	"context"
	"sync"
	"time"
)

// notifyWindow is the shortest time between two notifications of one
// queue by one broker's publishes outside a transaction. A NOTIFY costs
// its transaction's commit a server-wide lock (commits that notify queue
// up behind each other), so under a stream of single publishes a broker
// notifies a queue at most once a window: a publish within the window of
// the queue's last notification leaves it to one trailing notification,
// sent once the window ends (after the publish committed). Consumers
// therefore hear of every message, at most a window late, while the
// first publish after a quiet moment wakes them at once. Publishes
// inside a caller's transaction always notify in their statement (the
// notification waits for the commit, which no trailing one could).
const notifyWindow = time.Millisecond

// notifier decides, per publish, which queues its statement notifies,
// and sends the trailing notifications of the others.
type notifier struct {
	b      *Broker
	window time.Duration // notifyWindow, but in tests

	mu      sync.Mutex
	last    map[string]time.Time // when each queue was last notified
	pending map[string]bool      // queues owed a trailing notification
	timer   *time.Timer          // sends them; nil when none is owed
	closed  bool
	wg      sync.WaitGroup // a trailing notification running
}

func newNotifier(b *Broker) *notifier {
	return &notifier{b: b, window: notifyWindow, last: map[string]time.Time{}, pending: map[string]bool{}}
}

// distinct returns the queues, once each, in order.
func distinct(queues []string) []string {
	seen := make(map[string]bool, 1)
	var out []string
	for _, q := range queues {
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}

// split returns the queues a publish's statement notifies (none was
// notified within the window) and the ones it leaves to a trailing
// notification (owe, once the publish has committed).
func (n *notifier) split(queues []string) (now, later []string) {
	t := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.last) > 4096 { // forget queues quiet for a window
		for q, at := range n.last {
			if t.Sub(at) >= n.window {
				delete(n.last, q)
			}
		}
	}
	for _, q := range queues {
		if at, ok := n.last[q]; ok && t.Sub(at) < n.window {
			later = append(later, q)
			continue
		}
		n.last[q] = t
		now = append(now, q)
	}
	return now, later
}

// owe schedules a trailing notification of queues, whose messages are
// committed, at the end of the window.
func (n *notifier) owe(queues []string) {
	if len(queues) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	for _, q := range queues {
		n.pending[q] = true
	}
	if n.timer == nil {
		n.wg.Add(1)
		n.timer = time.AfterFunc(n.window, n.flush)
	}
}

// flush sends the trailing notification of every queue owed one.
func (n *notifier) flush() {
	defer n.wg.Done()
	t := time.Now()
	n.mu.Lock()
	queues := make([]string, 0, len(n.pending))
	for q := range n.pending {
		queues = append(queues, q)
		n.last[q] = t
	}
	clear(n.pending)
	n.timer = nil
	n.mu.Unlock()
	ctx, cancel := n.b.bound(context.Background())
	defer cancel()
	// A failure loses only the wake-up: consumers poll
	// (Options.PollInterval).
	n.b.pool.Exec(ctx, n.b.sql.notify, n.b.channel, queues)
}

// close drops what is owed (consumers poll) and waits for a trailing
// notification under way.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	if n.timer != nil && n.timer.Stop() {
		n.wg.Done()
	}
	n.timer = nil
	n.mu.Unlock()
	n.wg.Wait()
}

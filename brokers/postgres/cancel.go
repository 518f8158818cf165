package postgresbroker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/errand-go/errand/driver"
)

var _ driver.CancelNotifier = (*Broker)(nil)

// Cancel notices (driver.CancelNotifier): NotifyCancel sends them with
// NOTIFY on the schema's cancel channel (cancelChannelName), and every
// broker on the schema hears them on the listening connection it already
// holds for its fetches (listen.go), which LISTENs on both channels. A
// notice's payload is a JSON array of task UUIDs.

// maxNotice is the longest payload one NOTIFY carries (PostgreSQL's
// limit is 8000 bytes).
const maxNotice = 7999

// cancelChannelName is the NOTIFY channel of the cancel notices of
// schema; a name over PostgreSQL's 63 bytes is shortened with a hash of
// the schema.
func cancelChannelName(schema string) string {
	ch := "errand_cancel:" + schema
	if len(ch) > 63 {
		sum := sha256.Sum256([]byte(schema))
		ch = "errand_cancel:" + hex.EncodeToString(sum[:16])
	}
	return ch
}

// NotifyCancel tells every broker listening on the schema (ListenCancel)
// that taskUUIDs were cancelled, in one statement: one NOTIFY per payload
// of up to 7999 bytes (a JSON array of UUIDs; a long list takes several).
// A UUID too long for a payload of its own is refused with an error and
// nothing is sent.
func (b *Broker) NotifyCancel(ctx context.Context, taskUUIDs []string) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	payloads, err := cancelPayloads(taskUUIDs)
	if err != nil || len(payloads) == 0 {
		return err
	}
	bounded, cancel := b.bound(ctx)
	defer cancel()
	if _, err := b.pool.Exec(bounded, b.sql.notify, b.cancelChannel, payloads); err != nil {
		return b.fail(ctx, bounded, "notify cancel", err)
	}
	return nil
}

// cancelPayloads splits ids into JSON arrays of at most maxNotice bytes.
func cancelPayloads(ids []string) ([]string, error) {
	var out []string
	cur := []byte{'['}
	for _, id := range ids {
		enc, err := json.Marshal(id)
		if err != nil {
			return nil, fmt.Errorf("postgres broker: notify cancel: %w", err)
		}
		if len(enc)+2 > maxNotice {
			return nil, fmt.Errorf("postgres broker: notify cancel: task UUID of %d bytes does not fit a notice (%d bytes at most)", len(id), maxNotice-4)
		}
		if len(cur)+len(enc)+2 > maxNotice {
			out = append(out, string(append(cur, ']')))
			cur = []byte{'['}
		}
		if len(cur) > 1 {
			cur = append(cur, ',')
		}
		cur = append(cur, enc...)
	}
	if len(cur) > 1 {
		out = append(out, string(append(cur, ']')))
	}
	return out, nil
}

// ListenCancel calls notify with the UUIDs of each cancel notice sent
// on the schema after it returned, from the broker's listening
// connection (started here when no Fetch started it yet), until ctx is
// done or Close. It returns once that connection listens, or an error
// when it does not within ctx and CallTimeout (the server unreachable).
// notify is called from the listener's goroutine, one notice at a time,
// which Close waits for; while the listener reconnects, notices are lost
// (errand finds the cancel at the task's next lease extension).
func (b *Broker) ListenCancel(ctx context.Context, notify func(taskUUIDs []string)) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	l := b.listen
	sub := &cancelSub{ctx: ctx, notify: notify}
	l.addCancel(sub)
	l.start(ctx)
	bounded, cancel := b.bound(ctx)
	defer cancel()
	select {
	case <-l.up():
	case <-bounded.Done():
		l.removeCancel(sub)
		if err := b.checkOpen(); err != nil {
			return err
		}
		return fmt.Errorf("postgres broker: listen for cancel notices: the listening connection is not up: %w", bounded.Err())
	case <-b.closed:
		l.removeCancel(sub)
		return errClosed
	}
	stop := context.AfterFunc(ctx, func() { l.removeCancel(sub) })
	l.cancels.mu.Lock()
	sub.stop = stop
	l.cancels.mu.Unlock()
	return nil
}

// cancelSub is one ListenCancel call.
type cancelSub struct {
	ctx    context.Context
	notify func([]string)
	stop   func() bool // ends the AfterFunc removing it; nil before it is set
}

// cancelSubs are a listener's ListenCancel calls.
type cancelSubs struct {
	mu   sync.Mutex
	subs map[*cancelSub]struct{}
}

func (l *listener) addCancel(s *cancelSub) {
	l.cancels.mu.Lock()
	defer l.cancels.mu.Unlock()
	if l.cancels.subs == nil {
		l.cancels.subs = map[*cancelSub]struct{}{}
	}
	l.cancels.subs[s] = struct{}{}
}

func (l *listener) removeCancel(s *cancelSub) {
	l.cancels.mu.Lock()
	defer l.cancels.mu.Unlock()
	delete(l.cancels.subs, s)
}

// dropCancels forgets every ListenCancel call (Close).
func (l *listener) dropCancels() {
	l.cancels.mu.Lock()
	defer l.cancels.mu.Unlock()
	for s := range l.cancels.subs {
		if s.stop != nil {
			s.stop()
		}
	}
	clear(l.cancels.subs)
}

// cancelled delivers a cancel notice's payload to every ListenCancel
// whose ctx is live. A payload that is not a JSON array of strings (not
// a broker's) is ignored.
func (l *listener) cancelled(payload string) {
	var ids []string
	if err := json.Unmarshal([]byte(payload), &ids); err != nil || len(ids) == 0 {
		return
	}
	l.cancels.mu.Lock()
	subs := make([]*cancelSub, 0, len(l.cancels.subs))
	for s := range l.cancels.subs {
		subs = append(subs, s)
	}
	l.cancels.mu.Unlock()
	for _, s := range subs {
		if s.ctx.Err() == nil {
			s.notify(slices.Clone(ids))
		}
	}
}

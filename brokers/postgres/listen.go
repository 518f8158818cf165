package postgresbroker

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener is a broker's one listening connection: LISTEN on the
// schema's channel, whose notifications (payload: a queue) wake the
// broker's Fetch calls blocked on that queue, and on its cancel channel,
// whose notices go to the ListenCancel calls (cancel.go). It is started
// by the first Fetch or ListenCancel (a broker that only publishes holds
// no connection of its own) and runs until Close, reconnecting after a
// failure; while it is down, and after it comes back, blocked fetches
// look again (a notification may have been lost), and each waits at most
// Options.PollInterval.
//
// The connection is its own (a copy of the pool's configuration), not
// one of the pool's: a listening session is held for the broker's life.
type listener struct {
	b *Broker

	mu      sync.Mutex
	waiters map[string]chan struct{} // closed by a notification for the queue
	started bool
	ready   chan struct{} // closed after the first LISTEN succeeded or failed
	upCh    chan struct{} // closed while a session listens; a new one after it ends
	cancel  context.CancelFunc
	done    chan struct{}

	cancels cancelSubs // the ListenCancel calls (cancel.go)
}

func newListener(b *Broker) *listener {
	return &listener{b: b, waiters: map[string]chan struct{}{}, ready: make(chan struct{}), upCh: make(chan struct{}), done: make(chan struct{})}
}

// up returns a channel closed once the listener listens (at once when it
// does now).
func (l *listener) up() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.upCh
}

// setUp records whether a session listens.
func (l *listener) setUp(listening bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.upCh:
		if !listening {
			l.upCh = make(chan struct{})
		}
	default:
		if listening {
			close(l.upCh)
		}
	}
}

// start starts the listener once, and waits (bounded by ctx and
// CallTimeout) for its first LISTEN, so that a publish after the caller's
// first look at its queue is not missed.
func (l *listener) start(ctx context.Context) {
	l.mu.Lock()
	if !l.started {
		l.started = true
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		go l.run(lctx)
	}
	l.mu.Unlock()
	bounded, cancel := l.b.bound(ctx)
	defer cancel()
	select {
	case <-l.ready:
	case <-bounded.Done():
	case <-l.b.closed:
	}
}

// wait returns a channel closed by the next notification for queue (or
// any event that may have lost one). Take it before looking at the queue.
func (l *listener) wait(queue string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.waiters[queue]
	if !ok {
		ch = make(chan struct{})
		l.waiters[queue] = ch
	}
	return ch
}

func (l *listener) wake(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.waiters[queue]; ok {
		close(ch)
		delete(l.waiters, queue)
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for q, ch := range l.waiters {
		close(ch)
		delete(l.waiters, q)
	}
}

// stop ends the listener and waits for it.
func (l *listener) stop() {
	l.mu.Lock()
	started := l.started
	l.started = true // none starts after Close
	l.mu.Unlock()
	if !started {
		return
	}
	l.cancel()
	<-l.done
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	first := true
	signalReady := func() {
		if first {
			first = false
			close(l.ready)
		}
	}
	defer signalReady()
	backoff := minReconnect
	for ctx.Err() == nil {
		listened, err := l.session(ctx, signalReady)
		if err == nil || ctx.Err() != nil {
			continue
		}
		signalReady()
		l.wakeAll() // notifications may be lost: every waiter looks again
		if listened {
			backoff = minReconnect
		}
		// A pause before reconnecting, doubling while the server stays
		// away, at most PollInterval; waiters poll meanwhile.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		backoff = min(backoff*2, max(l.b.opts.PollInterval, minReconnect))
	}
}

// minReconnect is the listener's first pause before it connects again.
const minReconnect = 50 * time.Millisecond

// session connects, listens, and delivers notifications until the
// connection fails or ctx ends. listened reports whether LISTEN took
// effect.
func (l *listener) session(ctx context.Context, listening func()) (listened bool, err error) {
	cfg := l.b.pool.Config().ConnConfig.Copy()
	cctx, cancel := l.b.bound(ctx)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.b.channel}.Sanitize())
	}
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.b.cancelChannel}.Sanitize())
	}
	cancel()
	if err != nil {
		if conn != nil {
			l.closeConn(conn)
		}
		return false, err
	}
	defer l.closeConn(conn)
	l.setUp(true)
	defer l.setUp(false)
	listening()
	l.wakeAll() // what was published before LISTEN took effect
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Channel == l.b.cancelChannel {
			l.cancelled(n.Payload)
			continue
		}
		l.wake(n.Payload)
	}
}

// closeConn closes conn without waiting on a server that stopped
// answering.
func (l *listener) closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

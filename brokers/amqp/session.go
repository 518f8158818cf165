package amqpbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A session is one AMQP connection of the broker and its own channel,
// dialled on first use and again after the connection is lost. The broker
// keeps two: publishes go on one connection and consumers on the other,
// so a connection RabbitMQ blocks for publishing (a memory or disk alarm)
// never stops acks and deliveries.
type session struct {
	b       *Broker
	name    string
	confirm bool // the session's channel is in confirm mode

	mu      sync.Mutex
	conn    *amqp.Connection
	sock    net.Conn // conn's socket: closing it ends a wedged connection
	ch      *amqp.Channel
	dialing chan struct{} // closed when the running dial ends
	dialErr error
	blocked string // RabbitMQ's reason while it blocks the connection
	closed  bool
}

func newSession(b *Broker, name string, confirm bool) *session {
	return &session{b: b, name: name, confirm: confirm}
}

// dialer returns the amqp091 dial function of the broker: TCP with CallTimeout,
// a deadline on the handshake (amqp091 clears it once open), and each
// socket remembered by the session that dials it.
func (b *Broker) dialer() func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if b.opts.Dial != nil {
			c, err = b.opts.Dial(network, addr)
		} else {
			c, err = net.DialTimeout(network, addr, b.opts.CallTimeout)
		}
		if err != nil {
			return nil, err
		}
		if err := c.SetDeadline(time.Now().Add(b.opts.CallTimeout)); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// connection returns the live connection, dialling when there is none.
// Only one dial runs at a time; ctx bounds the wait for it, not the dial
// (bounded by CallTimeout on its own).
func (s *session) connection(ctx context.Context) (*amqp.Connection, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errClosed
		}
		if s.conn != nil && !s.conn.IsClosed() {
			c := s.conn
			s.mu.Unlock()
			return c, nil
		}
		wait := s.dialing
		if wait == nil {
			wait = make(chan struct{})
			s.dialing = wait
			go s.dial(wait)
		}
		s.mu.Unlock()
		select {
		case <-wait:
			s.mu.Lock()
			err := s.dialErr
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("amqp broker: connect: %w", ctx.Err())
		}
	}
}

func (s *session) dial(done chan struct{}) {
	var sock net.Conn
	cfg := s.b.cfg
	inner := cfg.Dial
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := inner(network, addr)
		sock = c
		return c, err
	}
	conn, err := amqp.DialConfig(s.b.url, cfg)
	var ch *amqp.Channel
	if err == nil {
		ch, err = s.openChannel(conn)
		if err != nil {
			conn.Close()
		}
	}
	s.b.log.Debug("amqp broker: dial", "connection", s.name, "err", err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(done)
	s.dialing = nil
	if err != nil {
		s.dialErr = fmt.Errorf("amqp broker: connect: %w", err)
		return
	}
	if s.closed {
		s.dialErr = errClosed
		sock.Close()
		return
	}
	s.dialErr = nil
	s.conn, s.sock, s.ch, s.blocked = conn, sock, ch, ""
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watch(conn, closes, blocks)
}

// watch follows one connection until it closes: it records RabbitMQ's
// blocked and unblocked notices, and forgets the declared queues when the
// connection is lost (the server may have restarted without them, or an
// operator deleted one).
func (s *session) watch(conn *amqp.Connection, closes chan *amqp.Error, blocks chan amqp.Blocking) {
	for {
		select {
		case bl, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			s.mu.Lock()
			if s.conn == conn {
				s.blocked = ""
				if bl.Active {
					s.blocked = bl.Reason
				}
			}
			s.mu.Unlock()
			if bl.Active {
				s.b.log.Warn("amqp broker: RabbitMQ blocked the connection", "connection", s.name, "reason", bl.Reason)
			} else {
				s.b.log.Info("amqp broker: RabbitMQ unblocked the connection", "connection", s.name)
			}
		case err := <-closes:
			if err != nil {
				s.b.log.Warn("amqp broker: connection lost", "connection", s.name, "err", err)
			}
			s.b.forget()
			return
		}
	}
}

func (s *session) openChannel(conn *amqp.Connection) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if s.confirm {
		if err := ch.Confirm(false); err != nil {
			ch.Close()
			return nil, err
		}
		s.b.returns(ch)
	}
	return ch, nil
}

// channel returns the session's own channel, open, dialling or opening a
// new channel when it was closed (a channel error such as a queue declared
// with other arguments closes it alone).
func (s *session) channel(ctx context.Context) (*amqp.Channel, error) {
	conn, err := s.connection(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != conn {
		return nil, errors.New("amqp broker: connection lost")
	}
	if s.ch == nil || s.ch.IsClosed() {
		ch, err := s.openChannel(conn)
		if err != nil {
			return nil, fmt.Errorf("amqp broker: open channel: %w", err)
		}
		s.ch = ch
	}
	return s.ch, nil
}

// blockedReason is RabbitMQ's reason while it blocks the connection.
func (s *session) blockedReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blocked
}

// do runs fn on the session's channel, bounded by ctx and CallTimeout.
// amqp091's calls take no ctx: when ctx ends first, do returns its error
// and kills the connection, which ends fn (a server that stopped answering
// would hold it for ever); the next call dials again.
func (s *session) do(ctx context.Context, fn func(ch *amqp.Channel) error) error {
	ctx, cancel := s.b.bound(ctx)
	defer cancel()
	ch, err := s.channel(ctx)
	if err != nil {
		return err
	}
	return s.call(ctx, ch, func() error { return fn(ch) })
}

// call runs fn, synchronous methods on ch, alone on ch and bounded by ctx
// (see run). amqp091 matches a channel's replies to its requests in
// order but does not keep two callers' requests apart: RabbitMQ closes the
// connection ("unexpected command received") when a second synchronous
// method arrives before the first one's reply.
func (s *session) call(ctx context.Context, ch *amqp.Channel, fn func() error) error {
	v, _ := s.b.chLocks.LoadOrStore(ch, make(chan struct{}, 1))
	lock := v.(chan struct{})
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("amqp broker: waiting for the channel: %w", ctx.Err())
	}
	// The lock is released when fn ends, not when run gives up waiting
	// for it: on the consuming connection fn goes on after ctx ends, and
	// a second caller's method must not be sent before its reply.
	return s.run(ctx, func() error {
		defer func() { <-lock }()
		return fn()
	})
}

// run runs fn, a call on this session's connection, until ctx ends, and
// then answers ctx's error. On the publishing connection it also kills the
// connection, so fn returns at once (a confirm that never comes would
// otherwise hold the channel). On the consuming connection it leaves fn
// running: killing that connection would lose every lease on it, while a
// server silent for a moment may answer again; a server that stays silent
// misses its heartbeats, and amqp091 then closes the connection, which
// ends fn.
func (s *session) run(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if s.confirm {
			s.kill()
			<-done
		}
		return fmt.Errorf("amqp broker: no answer from RabbitMQ: %w", ctx.Err())
	}
}

// kill closes the session's socket at once: amqp091 then shuts the
// connection down, failing every call waiting on it.
func (s *session) kill() {
	s.mu.Lock()
	sock := s.sock
	s.mu.Unlock()
	if sock != nil {
		sock.Close()
	}
}

// close ends the session for good.
func (s *session) close() error {
	s.mu.Lock()
	s.closed = true
	conn, sock := s.conn, s.sock
	s.mu.Unlock()
	if conn == nil {
		return nil
	}
	// A polite close, bounded: a silent server must not hold Close.
	err := conn.CloseDeadline(time.Now().Add(min(s.b.opts.CallTimeout, 2*time.Second)))
	sock.Close()
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return nil // the connection is gone either way
	}
	return nil
}

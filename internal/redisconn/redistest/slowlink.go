package redistest

import (
	"bytes"
	"context"
	"net"
	"sync"
	"time"
)

// SlowLink shapes the connections of a go-redis client whose dialer is
// its Dial: the reply to any command whose bytes hold Late arrives just
// after the client's read deadline — the command reaches the server and
// runs, its reply is merely late, as on a slow network or for a reply too
// large to read in time — and replies are read at no more than Rate bytes
// a second (0: no bound).
type SlowLink struct {
	Late []byte
	Rate int
}

// Dial connects to addr through the link.
func (s SlowLink) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, link: s}, nil
}

type slowConn struct {
	net.Conn
	link SlowLink
	mu   sync.Mutex
	late bool
	dl   time.Time
}

func (c *slowConn) Write(p []byte) (int, error) {
	if c.link.Late != nil && bytes.Contains(p, c.link.Late) {
		c.mu.Lock()
		c.late = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *slowConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.dl = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *slowConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.dl = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// Read is the simulated link: its latency and its bandwidth.
func (c *slowConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	late, dl := c.late, c.dl
	c.late = false
	c.mu.Unlock()
	if late && !dl.IsZero() {
		time.Sleep(time.Until(dl) + 10*time.Millisecond) // the reply comes in after the deadline
	}
	if c.link.Rate <= 0 {
		return c.Conn.Read(p)
	}
	const chunk = 64 << 10
	n, err := c.Conn.Read(p[:min(len(p), chunk)])
	time.Sleep(time.Duration(n) * time.Second / time.Duration(c.link.Rate))
	return n, err
}

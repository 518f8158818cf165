package driver

import (
	"context"
	"time"
)

// Slot names a concurrency limit: at most Limit holders may hold a slot of
// Key at once (Limit >= 1).
type Slot struct {
	Key   string
	Limit int
}

// ConcurrencyLimiter is implemented by brokers that keep concurrency limits
// on their server, for errand's fleet-wide caps (errand.WithConcurrencyLimit
// per task name, and per queue): every worker of every process on that
// server takes its slots from the same count. A slot is held under a
// lease: it lapses ttl after its holder's last Acquire or Renew, so the
// slots of a killed worker come back on their own.
//
// Every method is one atomic step on the server (a Lua script, one
// statement), with the server's clock where it has one, may be called
// concurrently, and returns an error, never panics or blocks, after Close.
type ConcurrencyLimiter interface {
	// Acquire takes one slot of every key of slots for holder, all or
	// none: it takes them when, for each key, fewer than its Limit other
	// holders hold a slot whose lease has not lapsed, and reports true;
	// otherwise it takes nothing and reports false. A holder that already
	// holds a slot of a key keeps it (renewed for ttl). A key's limit is
	// the caller's: every caller of one key should pass the same one.
	Acquire(ctx context.Context, holder string, slots []Slot, ttl time.Duration) (bool, error)

	// Renew renews holder's slots of keys for ttl from now. A slot whose
	// lease lapsed (and which another holder may have taken since) is not
	// renewed: Renew then answers an error wrapping ErrLeaseLost, and
	// renews the others.
	Renew(ctx context.Context, holder string, keys []string, ttl time.Duration) error

	// Free gives holder's slots of keys back at once. Freeing a slot not
	// held (lapsed, or never taken) is not an error.
	Free(ctx context.Context, holder string, keys []string) error
}

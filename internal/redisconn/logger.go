package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis has one logger for the whole process (redis.SetLogger), which
// prints to stderr unless replaced: about 70 lines per worker while a
// server is down for 2s. errand promises silence unless the user's slog
// logger says otherwise, so the Redis drivers replace it, once, on their
// first New or Open, with a forwarder to the logger set by UseLogger:
// nothing until a driver is given one.

var (
	installOnce sync.Once
	current     atomic.Pointer[slog.Logger]
)

// Quiet installs errand's go-redis logger if it is not installed yet:
// go-redis's lines then go to the logger last passed to UseLogger, or
// nowhere. A program that wants go-redis's own logger back calls
// redis.SetLogger after making its first Redis broker or backend.
func Quiet() {
	installOnce.Do(func() { goredis.SetLogger(forwarder{}) })
}

// UseLogger installs errand's go-redis logger (see Quiet) and, when l is
// not nil, sends go-redis's lines to l from now on, at Warn with the
// attribute component=go-redis. go-redis's logger is process-wide: the
// most recent non-nil l wins, whichever broker or backend set it; nil
// leaves the current one in place.
func UseLogger(l *slog.Logger) {
	Quiet()
	if l != nil {
		current.Store(l)
	}
}

type forwarder struct{}

func (forwarder) Printf(ctx context.Context, format string, v ...any) {
	l := current.Load()
	if l == nil || !l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	msg := strings.TrimSpace(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
	l.WarnContext(ctx, msg, "component", "go-redis")
}

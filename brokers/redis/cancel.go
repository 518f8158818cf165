package redisbroker

import (
	"context"
	"time"
)

// honourCancel runs call and returns when it does or when ctx is done,
// whichever comes first. go-redis honours ctx deadlines (with
// ContextTimeoutEnabled) but not cancellation: a call begun under a long
// deadline would hold its caller until that deadline even after ctx is
// cancelled — errand's Shutdown cancels the ctx of the acks and releases
// still in flight once its own deadline has passed, and must not wait for
// them. An abandoned call still ends by its ctx deadline or the client's
// timeouts; its outcome is unknown to the caller, which is told ctx.Err().
func honourCancel[T any](ctx context.Context, call func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return call()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	runCall(func() {
		v, err := call()
		ch <- result{v, err}
	})
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// callers are the goroutines honourCancel's calls run on. One stays for a
// second or two once idle, so that its stack, grown by go-redis's deep
// calls, serves the next calls: a goroutine of its own per call would
// start small and copy its stack as it grew, every time.
var callers = make(chan func())

// callerIdle is how long, at least, an idle caller waits for a call.
const callerIdle = time.Second

// runCall runs f on an idle caller, or on a new one.
func runCall(f func()) {
	select {
	case callers <- f:
	default:
		go caller(f)
	}
}

// caller runs f, then the calls handed to it, until it has had none for
// a whole callerIdle.
func caller(f func()) {
	f()
	t := time.NewTicker(callerIdle)
	defer t.Stop()
	busy := true
	for {
		select {
		case f := <-callers:
			f()
			busy = true
		case <-t.C:
			if !busy {
				return
			}
			busy = false
		}
	}
}

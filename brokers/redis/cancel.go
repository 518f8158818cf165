package redisbroker

import "context"

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
	go func() {
		v, err := call()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

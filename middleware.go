package errand

import "context"

// Middleware wraps running tasks on a worker, the way net/http middleware
// wraps handlers: tracing, metrics, logging, panics-to-alerts. Each gets
// the next handler and returns one that calls it (or not), with the task's
// context (which it may extend: the function sees what it passes on), the
// signature (Headers carry what producer middleware put there), and the
// outcome next returns. It is the one hook on running tasks: code to run
// before and after each task is a Middleware that does its work around
// its call of next:
//
//	func(next errand.TaskHandler) errand.TaskHandler {
//		return func(ctx context.Context, sig *errand.Signature) (*errand.TaskState, error) {
//			log.Printf("start %s", sig.Name)
//			st, err := next(ctx, sig)
//			if st != nil {
//				log.Printf("%s ended %s", sig.Name, st.State)
//			}
//			return st, err
//		}
//	}
type Middleware func(next TaskHandler) TaskHandler

// TaskHandler runs one attempt of a task: it calls the registered
// function and records how the attempt ended. It returns the state
// recorded (SUCCESS, RETRY or FAILURE; nil when nothing was recorded, e.g.
// the backend failed and the delivery will be redelivered, or the worker
// is shutting down) and the function's error (nil on success).
//
// Whether a delivery is an attempt at all is decided before the
// middleware, on every backend: a redelivery of a task already finished
// (SUCCESS, FAILURE), owned by a later attempt or claimed by another
// message, a task with no function here or with bad arguments, and one
// over its rate or concurrency limit never reach the middleware. A delivery that does
// has RECEIVED and STARTED recorded when the middleware runs. A middleware
// that does not call next skips the attempt: the worker gives the
// delivery back after ErrorBackoff, the task staying STARTED until a
// redelivery runs it.
type TaskHandler func(ctx context.Context, sig *Signature) (*TaskState, error)

// SendMiddleware wraps sending on the producer side, and the worker's
// sending of retries and callbacks: it may set headers on the signatures
// (sig.Headers travel with the message to the worker's middleware and
// TaskInfo), observe, or refuse by returning an error without calling
// next.
type SendMiddleware func(next SendHandler) SendHandler

// SendHandler sends signatures to the broker: the task of SendTask, the
// first task of SendChain, every member of SendGroup and SendChord, and a
// worker's retries and callbacks. It returns once the broker accepted them
// all (and their PENDING states are recorded, where errand records them).
type SendHandler func(ctx context.Context, sigs []*Signature) error

// wrapTask returns h wrapped in mw, mw[0] outermost.
func wrapTask(mw []Middleware, h TaskHandler) TaskHandler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// send runs base for sigs through the server's send middleware.
func (s *Server) send(ctx context.Context, sigs []*Signature, base SendHandler) error {
	h := base
	for i := len(s.cfg.SendMiddleware) - 1; i >= 0; i-- {
		h = s.cfg.SendMiddleware[i](h)
	}
	return h(ctx, sigs)
}

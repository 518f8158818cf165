package errand

import (
	"context"
	"fmt"

	"github.com/errand-go/errand/internal/portable"
)

// AsyncResult is a handle on one task's outcome, read from its server's
// backend.
type AsyncResult struct {
	// Signature is the task as it was sent; for a handle from
	// Server.Result, only its UUID is set.
	Signature *Signature
	backend   *portable.Backend
	srv       *Server // for Cancel
}

// Result returns a handle on the outcome of the task whose UUID is uuid,
// read from the server's backend: for a process that did not send the task
// itself (it kept the UUID, e.g. from sig.UUID after SendTask). It makes
// no call; the handle's State, Wait and Get return an error satisfying
// errors.Is(err, ErrTaskNotFound) when the backend does not know uuid.
func (s *Server) Result(uuid string) *AsyncResult {
	return &AsyncResult{Signature: &Signature{UUID: uuid}, backend: s.backend, srv: s}
}

// State returns the task's current state without waiting.
func (r *AsyncResult) State(ctx context.Context) (*TaskState, error) {
	return r.backend.GetState(ctx, r.Signature.UUID)
}

// Wait blocks until the task is SUCCESS, FAILURE or CANCELLED (a
// terminal state) and returns its state. It
// never spins: it waits on the backend's notifications where it has them
// and otherwise polls with a backoff from 2ms to 200ms. It
// returns ErrTaskNotFound at once for an unknown or expired task, and
// ctx.Err() when ctx is done.
func (r *AsyncResult) Wait(ctx context.Context) (*TaskState, error) {
	return r.backend.AwaitState(ctx, r.Signature.UUID, func(st *TaskState) bool { return st.State.Terminal() })
}

// Get waits like Wait and returns the task's results, or a *TaskError when
// it failed: test it with errors.Is and errors.As as on the worker's side
// (see [TaskError]). A CANCELLED task's *TaskError has Kind KindCancelled
// and satisfies errors.Is(err, ErrCancelled).
func (r *AsyncResult) Get(ctx context.Context) ([]Result, error) {
	st, err := r.Wait(ctx)
	if err != nil {
		return nil, err
	}
	switch st.State {
	case StateFailure:
		return nil, &TaskError{UUID: st.TaskUUID, Name: st.TaskName, Message: st.Error, Kind: ErrorKind(st.ErrorKind), Err: rebuild(st)}
	case StateCancelled: // its kind whatever the backend kept of it
		return nil, &TaskError{UUID: st.TaskUUID, Name: st.TaskName, Message: st.Error, Kind: KindCancelled, Err: rebuild(st)}
	}
	return st.Results, nil
}

// GetInto waits like Get and decodes the results, in order, into the values
// dst points to. Fewer pointers than results is fine; more is an error.
func (r *AsyncResult) GetInto(ctx context.Context, dst ...any) error {
	rs, err := r.Get(ctx)
	if err != nil {
		return err
	}
	return decodeResults(rs, dst)
}

func decodeResults(rs []Result, dst []any) error {
	if len(dst) > len(rs) {
		return fmt.Errorf("errand: %d results, %d destinations", len(rs), len(dst))
	}
	for i, d := range dst {
		if err := rs[i].Decode(d); err != nil {
			return err
		}
	}
	return nil
}

// ChainAsyncResult is a handle on a chain: one result per task, in order.
type ChainAsyncResult struct {
	Results []*AsyncResult
}

// Get waits for the tasks in order and returns the last one's results, or
// the error of the first task that failed (later tasks then never run).
func (c *ChainAsyncResult) Get(ctx context.Context) ([]Result, error) {
	var rs []Result
	for _, r := range c.Results {
		var err error
		if rs, err = r.Get(ctx); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// GetInto is Get decoding the last task's results into dst.
func (c *ChainAsyncResult) GetInto(ctx context.Context, dst ...any) error {
	rs, err := c.Get(ctx)
	if err != nil {
		return err
	}
	return decodeResults(rs, dst)
}

// ChordAsyncResult is a handle on a chord's members and its callback.
type ChordAsyncResult struct {
	Group    []*AsyncResult
	Callback *AsyncResult
}

// Get waits for the callback and returns its results. When a member failed
// for good, the callback is FAILURE with an error naming that member.
func (c *ChordAsyncResult) Get(ctx context.Context) ([]Result, error) {
	return c.Callback.Get(ctx)
}

// GetInto is Get decoding the callback's results into dst.
func (c *ChordAsyncResult) GetInto(ctx context.Context, dst ...any) error {
	return c.Callback.GetInto(ctx, dst...)
}

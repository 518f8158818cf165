package errand

import (
	"context"

	"github.com/errand-go/errand/internal/ctxvalues"
)

// TaskInfo describes the running task to its function.
type TaskInfo struct {
	UUID    string
	Name    string
	Attempt int // 1 on the first run, 2 on the first retry, ...
	// RetryCount is how many retries the worker allows after the first
	// attempt: the signature's RetryCount, capped at the worker's
	// WorkerConfig.MaxRetries (0 when the worker allows none), so
	// Attempt > RetryCount means this is the last attempt.
	RetryCount int
	GroupUUID  string
	Headers    Headers
}

type taskInfoKey struct{}

// taskInfoCtx is a task's ctx carrying its TaskInfo under taskInfoKey
// (TaskInfoFrom), one value for both: a worker makes one for every attempt.
type taskInfoCtx struct {
	context.Context
	info TaskInfo
}

func (c *taskInfoCtx) Value(key any) any {
	if _, ok := key.(taskInfoKey); ok {
		return c.info
	}
	return c.Context.Value(key)
}

// TaskInfoFrom returns the running task's identity and attempt number, from
// the ctx a worker passes to a task function.
func TaskInfoFrom(ctx context.Context) (TaskInfo, bool) {
	ti, ok := ctx.Value(taskInfoKey{}).(TaskInfo)
	return ti, ok
}

// withValuesOf returns ctx (its deadline and cancellation) with the values
// of values.
func withValuesOf(ctx, values context.Context) context.Context {
	return ctxvalues.Of(ctx, values)
}

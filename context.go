package errand

import (
	"context"

	"github.com/errand-go/errand/internal/ctxvalues"
)

// TaskInfo describes the running task to its function.
type TaskInfo struct {
	UUID    string
	Name    string
	Attempt int // 1 on the first run, 2 on the first retry or snooze, ...
	// RetryCount is how many retries the worker allows after the first
	// attempt: the signature's RetryCount, capped at the worker's
	// WorkerConfig.MaxRetries (0 when the worker allows none), plus
	// Snoozes (a snooze spends no retry), so Attempt > RetryCount means
	// this is the last attempt.
	RetryCount int
	// Snoozes is how many times the task snoozed before this attempt
	// ([Snooze]; Signature.Snoozes, capped at WorkerConfig.MaxSnoozes).
	Snoozes   int
	GroupUUID string
	Headers   Headers
}

type taskInfoKey struct{}

// taskInfoCtx is a task's ctx carrying its TaskInfo under taskInfoKey
// (TaskInfoFrom) and its progress writer under progressKey (SetProgress),
// one value for all: a worker makes one for every attempt.
type taskInfoCtx struct {
	context.Context
	info TaskInfo
	prog *progressWriter // under progressKey (SetProgress)
}

func (c *taskInfoCtx) Value(key any) any {
	switch key.(type) {
	case taskInfoKey:
		return c.info
	case progressKey:
		return c.prog
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

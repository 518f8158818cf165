package errand

import "context"

// TaskInfo describes the running task to its function.
type TaskInfo struct {
	UUID       string
	Name       string
	Attempt    int // 1 on the first run, 2 on the first retry, ...
	RetryCount int // retries allowed after the first attempt
	GroupUUID  string
	Headers    Headers
}

type taskInfoKey struct{}

func withTaskInfo(ctx context.Context, sig *Signature) context.Context {
	return context.WithValue(ctx, taskInfoKey{}, TaskInfo{
		UUID: sig.UUID, Name: sig.Name, Attempt: sig.attempt(), RetryCount: sig.RetryCount,
		GroupUUID: sig.GroupUUID, Headers: sig.Headers,
	})
}

// TaskInfoFrom returns the running task's identity and attempt number, from
// the ctx a worker passes to a task function.
func TaskInfoFrom(ctx context.Context) (TaskInfo, bool) {
	ti, ok := ctx.Value(taskInfoKey{}).(TaskInfo)
	return ti, ok
}

// valuesCtx is a context whose lifetime is its Context's and whose values
// are values' first.
type valuesCtx struct {
	context.Context
	values context.Context
}

func (c valuesCtx) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// withValuesOf returns ctx (its deadline and cancellation) with the values
// of values.
func withValuesOf(ctx, values context.Context) context.Context {
	return valuesCtx{Context: ctx, values: values}
}

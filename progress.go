package errand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// SetProgress records v, JSON-encoded, as the running task's progress:
// call it from a task function with the ctx the worker gave it. Producers
// read the last value through AsyncResult.Progress (or
// TaskState.Progress, from AsyncResult.State), and the task's final state
// (SUCCESS, FAILURE or RETRY) keeps it.
//
// It never waits for the backend: the value is written in the background,
// at most once per WorkerConfig.ProgressEvery (the first at once; in
// between, the latest value is kept and written when the interval ends),
// so a tight loop calling it costs a bounded number of writes. No write
// lands after the attempt's final state, which carries the last value set.
//
// It returns an error, recording nothing, when ctx is not a running task's
// (outside a task, or after its function returned), when v does not
// encode, and when the encoding is larger than WorkerConfig.MaxProgressSize
// (4 KiB by default; the error satisfies errors.Is(err,
// ErrPayloadTooLarge)). When the backend answers a progress write with
// ErrCancelled (the task was cancelled), the task's ctx is cancelled with
// a cause satisfying errors.Is(cause, ErrCancelled), and SetProgress
// returns that cause from then on. Other errors of the background writes
// go to the worker's ErrorHandler and log, not to the task.
func SetProgress(ctx context.Context, v any) error {
	p, _ := ctx.Value(progressKey{}).(*progressWriter)
	if p == nil {
		return errors.New("errand: SetProgress: ctx is not a running task's (pass the ctx the worker gave the task function): nothing recorded")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("errand: SetProgress of task %s (%s): %w: nothing recorded", p.name, p.uuid, err)
	}
	if p.limit > 0 && len(b) > p.limit {
		return fmt.Errorf("%w: SetProgress of task %s (%s): the value is %d bytes encoded, over the worker's MaxProgressSize of %d bytes: nothing recorded",
			ErrPayloadTooLarge, p.name, p.uuid, len(b), p.limit)
	}
	return p.set(b)
}

// Progress decodes the task's last reported progress (SetProgress) into
// the value dst points to, and reports whether there was one: false, with
// a nil error, when the task has reported none yet (or its state holds
// none). An unknown or expired task is an error satisfying
// errors.Is(err, ErrTaskNotFound). It reads the state once, without
// waiting.
func (r *AsyncResult) Progress(ctx context.Context, dst any) (bool, error) {
	st, err := r.State(ctx)
	if err != nil {
		return false, err
	}
	if len(st.Progress) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(st.Progress, dst); err != nil {
		return true, fmt.Errorf("errand: decode progress of task %s (%s): %w", st.TaskName, st.TaskUUID, err)
	}
	return true, nil
}

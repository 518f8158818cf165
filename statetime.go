package errand

import "time"

// The times of a task's state — CreatedAt, StartedAt, FinishedAt — are
// recorded at one resolution, the microsecond (the resolution of Redis's
// TIME, which the Redis broker reads when its fetch starts a task:
// driver.Colocation), and in order: CreatedAt ≤ StartedAt ≤ FinishedAt
// on every path. The producer's, the worker's and a server's clocks are
// different clocks, so the order is kept by clamping rather than trusted:
// an attempt starts no earlier than its task was created (the engine here,
// driver.Starter and driver.Colocation.FetchStart in the write that starts it),
// and ends no earlier than it started.

// stateTime is the time a state records now: the wall clock in UTC, cut to
// the microsecond.
func stateTime() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// notBefore returns t, or earliest when that is later.
func notBefore(t, earliest time.Time) time.Time {
	if earliest.After(t) {
		return earliest
	}
	return t
}

package memorybackend

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/memcoloc"
	"github.com/errand-go/errand/internal/named"
)

// Options configures a Backend.
type Options struct {
	// ResultExpiry is how long a task's state is kept after its last write.
	// Default: 1h (machinery's ResultsExpireIn).
	ResultExpiry time.Duration
	// GroupExpiry is how long a group's metadata is kept after its last
	// member completed (or its creation). Default: 24h; never less than
	// ResultExpiry.
	GroupExpiry time.Duration
}

// Backend is an in-process driver.Backend.
type Backend struct {
	opts Options
	name string

	mu     sync.Mutex
	states map[string]*stateEntry
	groups map[string]*group
	// waiters holds, per task UUID, a channel that the next write of that
	// task's state closes (WaitState); a write with no waiter costs nothing.
	waiters map[string]chan struct{}
	// nextSweep: the first write after it drops expired entries (at most
	// one sweep per tenth of ResultExpiry, never per write).
	nextSweep time.Time
	closed    bool
	loc       *memcoloc.Location // Location's answer
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.StateWaiter   = (*Backend)(nil)
	_ driver.Expirer       = (*Backend)(nil)
	_ driver.Starter       = (*Backend)(nil)
	_ driver.PendingWriter = (*Backend)(nil)
	_ driver.Located       = (*Backend)(nil)
	_ driver.Transactor    = (*Backend)(nil)
	_ driver.Canceller     = (*Backend)(nil)
)

type stateEntry struct {
	st      *driver.TaskState
	expires time.Time
}

type group struct {
	members []string
	index   map[string]bool
	done    map[string]bool
	claimer string
	expires time.Time
}

// New returns an empty backend. opts may be nil.
func New(opts *Options) *Backend {
	b := &Backend{states: map[string]*stateEntry{}, groups: map[string]*group{}, waiters: map[string]chan struct{}{}}
	if opts != nil {
		b.opts = *opts
	}
	b.opts.ResultExpiry, b.opts.GroupExpiry = driver.ExpiryDefaults(b.opts.ResultExpiry, b.opts.GroupExpiry)
	b.nextSweep = time.Now().Add(b.sweepEvery())
	b.loc = &memcoloc.Location{States: b}
	return b
}

// Location declares the backend's store of states (driver.Located), for
// errand's memory broker to co-locate with it (driver.Colocator): a value
// of an internal type of errand's, which only its memory broker
// understands. errand then sends, starts and settles a task in one call of
// the broker, as it does with the Redis drivers on one Redis.
func (b *Backend) Location() any { return b.loc }

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

// set stores a copy of st and wakes the task's waiters; b.mu must be held.
func (b *Backend) set(st *driver.TaskState, now time.Time) {
	b.keep(st.Copy(), now)
}

// keep stores st itself (a copy the caller no longer touches) and wakes
// the task's waiters; b.mu must be held.
func (b *Backend) keep(st *driver.TaskState, now time.Time) {
	if e := b.states[st.TaskUUID]; e != nil {
		e.st, e.expires = st, now.Add(b.opts.ResultExpiry)
	} else {
		b.states[st.TaskUUID] = &stateEntry{st: st, expires: now.Add(b.opts.ResultExpiry)}
	}
	if ch, ok := b.waiters[st.TaskUUID]; ok {
		close(ch)
		delete(b.waiters, st.TaskUUID)
	}
	if now.After(b.nextSweep) {
		b.sweep(now)
		b.nextSweep = now.Add(b.sweepEvery())
	}
}

// sweepEvery is the least time between two sweeps: a tenth of the result
// expiry (an expired entry is never returned: reads check expiry), at
// most a minute.
func (b *Backend) sweepEvery() time.Duration {
	return min(b.opts.ResultExpiry/10, time.Minute)
}

// Start begins each request's attempt if its task's previous state allows
// it (see driver.Starter), all under one lock.
func (b *Backend) Start(_ context.Context, reqs []driver.StartRequest) []driver.StartResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.StartFailed(len(reqs), driver.ErrClosed)
	}
	now := time.Now()
	out := make([]driver.StartResult, len(reqs))
	for i, r := range reqs {
		var prev *driver.TaskState
		if e, err := b.get(r.Started.TaskUUID, now); err == nil {
			prev = e.st.Copy() // the caller may keep it; e.st is replaced, never changed
		}
		out[i].Prev = prev
		if !r.Allows(prev) {
			continue
		}
		// RECEIVED is overwritten by STARTED under this same lock: no reader
		// sees it, and a waiter woken by it would find STARTED anyway.
		started := r.Started.Copy()
		if prev != nil {
			started.CreatedAt = prev.CreatedAt
			if prev.CreatedAt.After(started.StartedAt) { // never started before created
				started.StartedAt = prev.CreatedAt
			}
		}
		b.keep(started, now)
		out[i].Written = true
	}
	return out
}

// SetPendingIfAbsent stores a copy of each state whose task has none (or
// an expired one), under one lock. Inside a transaction (a
// memorybroker.Tx in ctx) it keeps them in the Tx, checked and written at
// its Commit.
func (b *Backend) SetPendingIfAbsent(ctx context.Context, sts []*driver.TaskState) []error {
	return b.setStates(ctx, sts, true)
}

// SetStates stores copies of sts, in order, under one lock, but for a
// state other than PENDING whose task is CANCELLED: that one is not
// written and answers an error wrapping driver.ErrCancelled (a cancel is
// never overwritten; driver.Canceller). Inside a transaction (a
// memorybroker.Tx in ctx) it keeps them in the Tx until its Commit, which
// drops such a write.
func (b *Backend) SetStates(ctx context.Context, sts []*driver.TaskState) []error {
	return b.setStates(ctx, sts, false)
}

// setStates stores copies of sts under one lock, or in the transaction
// ctx carries; when ifAbsent, only those whose task has no state (or an
// expired one). It answers under the batch convention.
func (b *Backend) setStates(ctx context.Context, sts []*driver.TaskState, ifAbsent bool) []error {
	if ok, err := b.inTx(ctx, func(p *txStates) { p.setStates(sts, ifAbsent) }); ok {
		return driver.BatchErrors(len(sts), err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.BatchErrors(len(sts), driver.ErrClosed)
	}
	return b.setLocked(sts, ifAbsent, time.Now())
}

// setLocked stores copies of sts at now (when ifAbsent, only where a task
// has no state), but none other than PENDING over a CANCELLED state; b.mu
// must be held. It answers under the batch convention: an error wrapping
// driver.ErrCancelled for each state it refused.
func (b *Backend) setLocked(sts []*driver.TaskState, ifAbsent bool, now time.Time) []error {
	var errs []error
	for i, st := range sts {
		e, err := b.get(st.TaskUUID, now)
		switch {
		case err == nil && ifAbsent:
			continue
		case err == nil && e.st.State == driver.StateCancelled && st.State != driver.StatePending:
			if errs == nil {
				errs = make([]error, len(sts))
			}
			errs[i] = fmt.Errorf("memory backend: task %s: %s not written: %w", st.TaskUUID, st.State, driver.ErrCancelled)
			continue
		}
		b.set(st, now)
	}
	return errs
}

// Cancel records each state, CANCELLED, over its task's state unless the
// task has none or a terminal one (driver.Canceller), all under one lock:
// the written state keeps the previous one's TaskName, Attempt and
// CreatedAt, and wakes the task's waiters. A state other than CANCELLED
// is refused with an error, writing nothing.
func (b *Backend) Cancel(_ context.Context, sts []*driver.TaskState) []driver.CancelResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]driver.CancelResult, len(sts))
	if b.closed {
		for i := range out {
			out[i].Err = driver.ErrClosed
		}
		return out
	}
	now := time.Now()
	for i, st := range sts {
		if st.State != driver.StateCancelled {
			out[i].Err = fmt.Errorf("memory backend: cancel of task %s with state %q; want %s", st.TaskUUID, st.State, driver.StateCancelled)
			continue
		}
		e, err := b.get(st.TaskUUID, now)
		if err != nil {
			continue // unknown or expired: nothing to cancel
		}
		out[i].Prev = e.st.Copy()
		if e.st.State.Terminal() {
			continue
		}
		c := st.Copy()
		c.TaskName, c.Attempt, c.CreatedAt = e.st.TaskName, e.st.Attempt, e.st.CreatedAt
		if c.FinishedAt.Before(c.CreatedAt) {
			c.FinishedAt = c.CreatedAt
		}
		b.keep(c, now)
		out[i].Written = true
	}
	return out
}

// sweep drops expired entries; b.mu must be held.
func (b *Backend) sweep(now time.Time) {
	for id, e := range b.states {
		if !e.expires.After(now) {
			delete(b.states, id)
			if ch, ok := b.waiters[id]; ok { // they wake to report it gone
				close(ch)
				delete(b.waiters, id)
			}
		}
	}
	for id, g := range b.groups {
		if !g.expires.After(now) {
			delete(b.groups, id)
		}
	}
}

func (b *Backend) get(id string, now time.Time) (*stateEntry, error) {
	if b.closed {
		return nil, driver.ErrClosed
	}
	e := b.states[id]
	if e == nil || !e.expires.After(now) {
		return nil, fmt.Errorf("memory backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	return e, nil
}

// GetState returns a copy of the task's state.
func (b *Backend) GetState(_ context.Context, id string) (*driver.TaskState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.get(id, time.Now())
	if err != nil {
		return nil, err
	}
	return e.st.Copy(), nil
}

// WaitState blocks until the task's state satisfies done, woken by writes.
func (b *Backend) WaitState(ctx context.Context, id string, done func(*driver.TaskState) bool) (*driver.TaskState, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		now := time.Now()
		e, err := b.get(id, now)
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		if done(e.st) {
			st := e.st.Copy()
			b.mu.Unlock()
			return st, nil
		}
		changed, ok := b.waiters[id]
		if !ok {
			changed = make(chan struct{})
			b.waiters[id] = changed
		}
		left := e.expires.Sub(now) // read under b.mu: writes renew it in place
		b.mu.Unlock()
		// Wake at the entry's expiry too, to report it as not found.
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		case <-timer.C:
		}
	}
}

// InitGroup records the group's members in order. Inside a transaction
// (a memorybroker.Tx in ctx) it keeps them in the Tx until its Commit.
func (b *Backend) InitGroup(ctx context.Context, groupUUID string, taskUUIDs []string) error {
	if ok, err := b.inTx(ctx, func(p *txStates) { p.initGroup(groupUUID, taskUUIDs) }); ok {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	b.initGroup(groupUUID, taskUUIDs, time.Now())
	return nil
}

// initGroup records the group at now; b.mu must be held.
func (b *Backend) initGroup(groupUUID string, taskUUIDs []string, now time.Time) {
	g := &group{members: slices.Clone(taskUUIDs), index: map[string]bool{}, done: map[string]bool{},
		expires: now.Add(b.opts.GroupExpiry)}
	for _, id := range taskUUIDs {
		g.index[id] = true
	}
	b.groups[groupUUID] = g
}

func (b *Backend) group(id string, now time.Time) (*group, error) {
	if b.closed {
		return nil, driver.ErrClosed
	}
	g := b.groups[id]
	if g == nil || !g.expires.After(now) {
		return nil, fmt.Errorf("memory backend: group %s: %w", id, driver.ErrGroupNotFound)
	}
	return g, nil
}

// CompleteGroupMember marks taskUUID done, once, and extends the group's
// life. A UUID that is not a member changes nothing and returns an error
// wrapping driver.ErrNotMember.
func (b *Backend) CompleteGroupMember(_ context.Context, groupUUID, taskUUID string) (int, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	g, err := b.group(groupUUID, now)
	if err != nil {
		return 0, 0, err
	}
	if !g.index[taskUUID] {
		return 0, 0, fmt.Errorf("memory backend: task %s, group %s: %w", taskUUID, groupUUID, driver.ErrNotMember)
	}
	g.done[taskUUID] = true
	g.expires = now.Add(b.opts.GroupExpiry)
	return len(g.done), len(g.members), nil
}

// ClaimChord lets the first claimer win, and that claimer again.
func (b *Backend) ClaimChord(_ context.Context, groupUUID, claimer string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.group(groupUUID, time.Now())
	if err != nil {
		return false, err
	}
	if g.claimer == "" {
		g.claimer = claimer
	}
	return g.claimer == claimer, nil
}

// GroupStates returns the members' states in group order.
func (b *Backend) GroupStates(_ context.Context, groupUUID string) ([]*driver.TaskState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	g, err := b.group(groupUUID, now)
	if err != nil {
		return nil, err
	}
	out := make([]*driver.TaskState, len(g.members))
	for i, id := range g.members {
		if e, err := b.get(id, now); err == nil {
			out[i] = e.st.Copy()
		} else {
			out[i] = &driver.TaskState{TaskUUID: id, State: driver.StatePending}
		}
	}
	return out, nil
}

// Close drops everything; later calls return driver.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.states, b.groups = nil, nil
	for id, ch := range b.waiters {
		close(ch)
		delete(b.waiters, id)
	}
	b.mu.Unlock()
	if b.name != "" {
		instances.Forget(b.name, b)
	}
	return nil
}

// instances holds the named backends of memory://NAME URLs.
var instances named.Registry[*Backend]

// Open returns the backend for a memory:// URL (see the package doc).
func Open(_ context.Context, u *url.URL) (driver.Backend, error) {
	var opts Options
	if err := driver.DurationParams(u.Query(), map[string]*time.Duration{"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry}); err != nil {
		return nil, fmt.Errorf("memory backend: %w", err)
	}
	return instances.Get(u.Host+u.Path, func(name string) *Backend {
		b := New(&opts)
		b.name = name
		return b
	}), nil
}

func init() { driver.RegisterBackend("memory", Open) }

package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/bridge"
)

// Config configures a Scheduler.
type Config struct {
	// Reload is how often Run reads the definitions again, so a change
	// made through another replica applies here. A change made through
	// this Scheduler applies at once. Default: 1s.
	Reload time.Duration
	// MissedAfter is how late a tick may be and still count as on time: a
	// tick further in the past when a scheduler first gets to it was
	// missed, and the entry's Missed policy decides. Default: 1 minute.
	MissedAfter time.Duration
	// CallTimeout bounds each call to the broker and each send. Default:
	// 10s.
	CallTimeout time.Duration
	// Store holds the schedules. Default: the server's broker, when it
	// keeps schedules (driver.ScheduleStore), with the server's closed and
	// ctx checks; New fails when it keeps none.
	Store driver.ScheduleStore
	// Logger receives warnings and errors. Default: discards everything.
	Logger *slog.Logger
}

// Scheduler sends the tasks of periodic schedules. Any number of
// Schedulers, in any number of processes, may run on one broker: each tick
// is sent once, by whichever claims it first (see the package doc).
type Scheduler struct {
	srv     *errand.Server
	store   driver.ScheduleStore
	cfg     Config
	log     *slog.Logger
	running atomic.Bool
	poke    chan struct{} // a local Set or Remove: reload now
}

// New returns a Scheduler that sends through srv and keeps its schedules
// in cfg.Store, by default srv's broker.
func New(srv *errand.Server, cfg Config) (*Scheduler, error) {
	if srv == nil {
		return nil, errors.New("schedule: New: a server is required")
	}
	if cfg.Store == nil {
		st, err := bridge.ScheduleStore(srv)
		if err != nil {
			return nil, fmt.Errorf("schedule: New: %w", err)
		}
		cfg.Store = st
	}
	if cfg.Reload <= 0 {
		cfg.Reload = time.Second
	}
	if cfg.MissedAfter <= 0 {
		cfg.MissedAfter = time.Minute
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Scheduler{srv: srv, store: cfg.Store, cfg: cfg, log: log, poke: make(chan struct{}, 1)}, nil
}

func (s *Scheduler) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

func (s *Scheduler) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// Set adds the schedule e, or changes the one with its ID, for every
// replica. Setting a definition equal to the stored one (the same spec,
// location, policy and signature) changes nothing, so each replica may
// Set its schedules when it starts: their missed ticks are still missed.
// A changed definition runs from now: its Since is now, and the ticks of
// the new spec before it never run.
func (s *Scheduler) Set(ctx context.Context, e Entry) error {
	if _, err := e.check(); err != nil {
		return err
	}
	e.Signature = template(e.Signature)
	e.Since = time.Now()
	data, err := e.encode()
	if err != nil {
		return fmt.Errorf("schedule: set %q: %w", e.ID, err)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	all, err := s.store.Schedules(cctx)
	if err != nil {
		return fmt.Errorf("schedule: set %q: %w", e.ID, err)
	}
	if old, ok := all[e.ID]; ok && same(old, data) {
		return nil
	}
	if err := s.store.PutSchedule(cctx, e.ID, data); err != nil {
		return fmt.Errorf("schedule: set %q: %w", e.ID, err)
	}
	s.wake()
	return nil
}

// Remove deletes schedule id for every replica: from the moment it
// returns, no replica claims another of its ticks. Unknown IDs are not an
// error.
func (s *Scheduler) Remove(ctx context.Context, id string) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.store.DeleteSchedule(cctx, id); err != nil {
		return fmt.Errorf("schedule: remove %q: %w", id, err)
	}
	s.wake()
	return nil
}

// List returns every schedule, by ID. A stored definition that does not
// decode is reported in the error, after the others.
func (s *Scheduler) List(ctx context.Context) ([]Entry, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	all, err := s.store.Schedules(cctx)
	if err != nil {
		return nil, fmt.Errorf("schedule: list: %w", err)
	}
	var out []Entry
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(all)) {
		e, _, err := decode(id, all[id])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// state is what Run knows of one schedule.
type state struct {
	e    Entry
	tk   ticker
	data []byte
	// from: every tick up to it is handled (claimed, by this replica or
	// another, or dropped as missed).
	from time.Time
}

// Run sends the tasks of every schedule as their ticks come, until ctx is
// done; it then returns ctx.Err(). Errors of the broker are logged and
// retried. A Scheduler runs one Run at a time.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("schedule: Run: already running")
	}
	defer s.running.Store(false)
	states := map[string]*state{}
	var nextReload time.Time
	retry := time.Duration(0) // after an error: when to try again
	for {
		now := time.Now()
		if !now.Before(nextReload) {
			if err := s.reload(ctx, states); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.log.Warn("schedule: reading the schedules", "err", err)
			}
			nextReload = time.Now().Add(s.cfg.Reload)
		}
		failed := false
		for _, id := range slices.Sorted(maps.Keys(states)) {
			if err := s.fire(ctx, states[id], time.Now()); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.log.Warn("schedule: claiming a tick", "schedule", id, "err", err)
				failed = true
			}
		}
		wakeAt := nextReload
		for _, st := range states {
			if t := st.tk.Next(st.from); !t.IsZero() && t.Before(wakeAt) { // zero: a spec that never matches
				wakeAt = t
			}
		}
		if failed {
			retry = min(max(retry*2, 50*time.Millisecond), s.cfg.Reload)
			wakeAt = time.Now().Add(retry)
		} else {
			retry = 0
		}
		timer := time.NewTimer(time.Until(wakeAt))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-s.poke:
			nextReload = time.Time{}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// reload reads every definition and updates states.
func (s *Scheduler) reload(ctx context.Context, states map[string]*state) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	all, err := s.store.Schedules(cctx)
	if err != nil {
		return err
	}
	for id := range states {
		if _, ok := all[id]; !ok {
			delete(states, id)
		}
	}
	var errs []error
	for id, data := range all {
		st := states[id]
		if st != nil && string(st.data) == string(data) {
			continue
		}
		e, tk, err := decode(id, data)
		if err != nil {
			errs = append(errs, err)
			delete(states, id)
			continue
		}
		if st == nil {
			last, err := s.store.LastTick(cctx, id)
			if err != nil {
				errs = append(errs, fmt.Errorf("schedule %q: last tick: %w", id, err))
				continue
			}
			st = &state{from: last}
			states[id] = st
		}
		st.e, st.tk, st.data = e, tk, data
		if st.from.Before(e.Since) {
			st.from = e.Since
		}
	}
	return errors.Join(errs...)
}

// fire claims and sends st's ticks due at now: each tick at most
// MissedAfter old, and for older (missed) ones what the entry's policy
// says. It stops at the first error (the broker's), leaving the ticks not
// yet handled for the next try.
func (s *Scheduler) fire(ctx context.Context, st *state, now time.Time) error {
	if ev, ok := st.tk.(every); ok {
		// Skip straight to the last missed tick instead of counting every
		// tick of a long gap.
		if k := ev.last(now.Add(-s.cfg.MissedAfter)).Add(-ev.d); st.from.Before(k) {
			st.from = k
		}
	}
	cut := now.Add(-s.cfg.MissedAfter)
	var missed time.Time
	var due []time.Time
	for t := st.tk.Next(st.from); !t.IsZero() && !t.After(now); t = st.tk.Next(t) {
		if t.Before(cut) {
			missed = t
		} else {
			due = append(due, t)
		}
	}
	if !missed.IsZero() {
		send := st.e.Missed == RunOnce
		if send || len(due) == 0 {
			// Claim the last missed tick (so no replica looks at the gap
			// again), and run it once under RunOnce.
			if err := s.claim(ctx, st, missed, send); err != nil {
				return err
			}
		}
		st.from = missed
	}
	for _, t := range due {
		if err := s.claim(ctx, st, t, true); err != nil {
			return err
		}
	}
	return nil
}

// claim claims tick for st and, when this replica won it and send is set,
// sends its task; st.from moves to tick once the claim is answered.
func (s *Scheduler) claim(ctx context.Context, st *state, tick time.Time, send bool) error {
	cctx, cancel := s.call(ctx)
	won, err := s.store.ClaimTick(cctx, st.e.ID, tick)
	cancel()
	if err != nil {
		return err
	}
	st.from = tick
	if won && send {
		s.send(ctx, st.e, tick)
	}
	return nil
}

// send sends e's task for tick, retrying a failed send with a backoff for
// as long as the tick is on time (MissedAfter) and ctx lasts: this replica
// holds the tick's claim, so no other sends it. A task it could not send
// in that time is lost, and logged.
func (s *Scheduler) send(ctx context.Context, e Entry, tick time.Time) {
	give := tick.Add(s.cfg.MissedAfter)
	backoff := 50 * time.Millisecond
	for {
		cctx, cancel := s.call(ctx)
		_, err := s.srv.SendTask(cctx, tickSignature(e, tick))
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(give) {
			s.log.Error("schedule: a tick's task could not be sent and is lost", "schedule", e.ID, "tick", tick, "err", err)
			return
		}
		s.log.Warn("schedule: sending a tick's task; retrying", "schedule", e.ID, "tick", tick, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		backoff = min(backoff*2, 5*time.Second)
	}
}

// tickSignature is e's task for tick: a copy of its signature under the
// tick's UUID, due at the tick, with the schedule headers; every linked
// signature gets a UUID derived from the tick's too, so a send retried
// after a partial failure repeats the same IDs.
func tickSignature(e Entry, tick time.Time) *errand.Signature {
	sig := e.Signature.Copy()
	id := TickUUID(e.ID, tick)
	sig.UUID = id
	eta := tick
	sig.ETA = &eta
	sig.Attempt = 0
	if sig.Headers == nil {
		sig.Headers = errand.Headers{}
	}
	sig.Headers[HeaderID] = e.ID
	sig.Headers[HeaderTick] = tick.UTC().Format(time.RFC3339Nano)
	relink(sig, id)
	return sig
}

// relink gives every signature linked to sig a UUID derived from base and
// its place.
func relink(sig *errand.Signature, base string) {
	for i, c := range sig.OnSuccess {
		c.UUID = nameUUID(fmt.Sprintf("%s/s%d", base, i))
		relink(c, c.UUID)
	}
	for i, c := range sig.OnError {
		c.UUID = nameUUID(fmt.Sprintf("%s/e%d", base, i))
		relink(c, c.UUID)
	}
	if c := sig.ChordCallback; c != nil {
		c.UUID = nameUUID(base + "/c")
		relink(c, c.UUID)
	}
}

// template is a copy of sig without what each tick sets (UUIDs, ETA,
// attempt), so that Setting the same task twice stores the same
// definition.
func template(sig *errand.Signature) *errand.Signature {
	sig = sig.Copy()
	var clear func(*errand.Signature)
	clear = func(s *errand.Signature) {
		if s == nil {
			return
		}
		s.UUID, s.ETA, s.Attempt = "", nil, 0
		for _, c := range s.OnSuccess {
			clear(c)
		}
		for _, c := range s.OnError {
			clear(c)
		}
		clear(s.ChordCallback)
	}
	clear(sig)
	return sig
}

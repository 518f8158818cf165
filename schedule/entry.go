package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/internal/uuid"
)

// Missed says what happens to the ticks of a schedule that passed while no
// scheduler ran (more than Config.MissedAfter ago).
type Missed int

const (
	// Skip drops missed ticks: the schedule goes on with its next tick.
	// The default.
	Skip Missed = iota
	// RunOnce runs the task once for all the ticks missed, as soon as a
	// scheduler runs again (however many ticks passed).
	RunOnce
)

func (m Missed) String() string {
	switch m {
	case Skip:
		return "skip"
	case RunOnce:
		return "run_once"
	}
	return fmt.Sprintf("Missed(%d)", int(m))
}

// Entry is one periodic task: when (Spec, Location) and what (Signature).
type Entry struct {
	// ID names the schedule; Set with an ID that exists changes it.
	// Required.
	ID string
	// Spec is when the task runs:
	//   - a standard 5-field cron expression, "minute hour day-of-month
	//     month day-of-week": "*/5 * * * *", "0 9 * * MON-FRI";
	//   - a descriptor: @yearly (@annually), @monthly, @weekly, @daily
	//     (@midnight), @hourly;
	//   - "@every D", D a Go duration of whole seconds, at least 1s: "@every
	//     30s", "@every 1h30m". Its ticks are the multiples of D since the
	//     Unix epoch (00:00:00 UTC, 1 January 1970), so every replica agrees
	//     on them: "@every 1h" ticks on the hour, "@every 30s" at :00 and
	//     :30.
	// A cron expression or descriptor may start with "CRON_TZ=Zone " (or
	// "TZ=Zone "), a time zone of the IANA database: "CRON_TZ=Europe/Paris
	// 0 9 * * *". Required.
	Spec string
	// Location is the time zone of Spec when Spec names none. Default: UTC
	// (not the local zone: replicas on hosts in different zones must
	// agree on the ticks).
	Location *time.Location
	// Signature is the task each tick sends: a copy, with the UUID
	// TickUUID(ID, tick), ETA the tick, and the headers HeaderID and
	// HeaderTick added. Its own UUID and ETA are ignored. Required.
	Signature *errand.Signature
	// Missed is the policy for ticks missed while no scheduler ran.
	// Default: Skip.
	Missed Missed
	// Since is when the definition last changed (set by Scheduler.Set;
	// read-only). Ticks before it never run, not even as missed ones.
	Since time.Time
}

// Headers the scheduler adds to every task it sends.
const (
	// HeaderID is the schedule's ID.
	HeaderID = "errand_schedule_id"
	// HeaderTick is the tick, in RFC 3339 with nanoseconds, UTC.
	HeaderTick = "errand_schedule_tick"
)

// Next returns the entry's first tick after t.
func (e Entry) Next(t time.Time) (time.Time, error) {
	s, err := parseSpec(e.Spec, e.Location)
	if err != nil {
		return time.Time{}, err
	}
	return s.Next(t), nil
}

// TickUUID is the UUID of the task schedule id sends for tick: the same in
// every replica, so a tick's task can be found (and is one task) whoever
// sent it. A name-based UUID (version 5).
func TickUUID(id string, tick time.Time) string {
	return nameUUID(id + "\x00" + tick.UTC().Format(time.RFC3339Nano))
}

// namespace is the UUID namespace of errand's scheduled tasks.
var namespace = [16]byte{0x6b, 0x1e, 0x2f, 0x55, 0x0c, 0x3d, 0x4a, 0x8e, 0x9b, 0x21, 0x77, 0x5c, 0xe0, 0x43, 0x19, 0xa6}

func nameUUID(name string) string { return uuid.SHA1(namespace, name) }

// parser reads the standard 5 fields and the descriptors (robfig/cron's
// ParseStandard).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ticker is a parsed spec: its first tick after a time.
type ticker interface{ Next(time.Time) time.Time }

// every ticks at the multiples of d since the Unix epoch.
type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	d := e.d.Nanoseconds()
	n := t.UnixNano()
	k := n / d
	if n < 0 && n%d != 0 {
		k-- // floor
	}
	return time.Unix(0, (k+1)*d).In(t.Location())
}

// last returns the latest tick at or before t.
func (e every) last(t time.Time) time.Time { return e.Next(t.Add(-e.d)) }

// parseSpec parses spec; loc is its zone when it names none (nil: UTC).
func parseSpec(spec string, loc *time.Location) (ticker, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("schedule: empty spec")
	}
	named := strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=")
	rest := spec
	if named {
		_, after, ok := strings.Cut(spec, " ")
		if !ok {
			return nil, fmt.Errorf("schedule: spec %q: a time zone without a schedule", spec)
		}
		rest = strings.TrimSpace(after)
	}
	if d, ok := strings.CutPrefix(rest, "@every"); ok {
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("schedule: spec %q: %w", spec, err)
		}
		if dur < time.Second || dur%time.Second != 0 {
			return nil, fmt.Errorf("schedule: spec %q: @every takes whole seconds, at least 1s", spec)
		}
		return every{dur}, nil
	}
	s, err := parser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule: spec %q: %w", spec, err)
	}
	if cs, ok := s.(*cron.SpecSchedule); ok && !named {
		if loc == nil {
			loc = time.UTC
		}
		cs.Location = loc
	}
	return s, nil
}

// record is an entry as the broker keeps it (driver.ScheduleStore's data).
type record struct {
	Spec      string          `json:"spec"`
	Location  string          `json:"location,omitempty"`
	Missed    string          `json:"missed"`
	Signature json.RawMessage `json:"signature"`
	Since     time.Time       `json:"since"`
}

// check validates e.
func (e Entry) check() (ticker, error) {
	if e.ID == "" {
		return nil, errors.New("schedule: entry without an ID")
	}
	if e.Signature == nil || e.Signature.Name == "" {
		return nil, fmt.Errorf("schedule: entry %q: a signature with a task name is required", e.ID)
	}
	if e.Missed != Skip && e.Missed != RunOnce {
		return nil, fmt.Errorf("schedule: entry %q: unknown Missed policy %d", e.ID, e.Missed)
	}
	return parseSpec(e.Spec, e.Location)
}

// encode returns e's stored form; Since is not part of what compares equal
// (see same).
func (e Entry) encode() ([]byte, error) {
	sig, err := errand.EncodeSignature(e.Signature)
	if err != nil {
		return nil, err
	}
	r := record{Spec: e.Spec, Missed: e.Missed.String(), Signature: sig, Since: e.Since.UTC()}
	if e.Location != nil {
		r.Location = e.Location.String()
	}
	return json.Marshal(r)
}

// decode reads an entry id's stored form.
func decode(id string, data []byte) (Entry, ticker, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return Entry{}, nil, fmt.Errorf("schedule: entry %q: %w", id, err)
	}
	e := Entry{ID: id, Spec: r.Spec, Since: r.Since}
	switch r.Missed {
	case "", "skip":
		e.Missed = Skip
	case "run_once":
		e.Missed = RunOnce
	default:
		return Entry{}, nil, fmt.Errorf("schedule: entry %q: unknown missed policy %q", id, r.Missed)
	}
	if r.Location != "" {
		loc, err := time.LoadLocation(r.Location)
		if err != nil {
			return Entry{}, nil, fmt.Errorf("schedule: entry %q: %w", id, err)
		}
		e.Location = loc
	}
	var sig errand.Signature
	if err := json.Unmarshal(r.Signature, &sig); err != nil {
		return Entry{}, nil, fmt.Errorf("schedule: entry %q: signature: %w", id, err)
	}
	e.Signature = &sig
	tk, err := e.check()
	if err != nil {
		return Entry{}, nil, err
	}
	return e, tk, nil
}

// same reports whether two stored forms define the same schedule (every
// field but Since).
func same(a, b []byte) bool {
	var ra, rb record
	if json.Unmarshal(a, &ra) != nil || json.Unmarshal(b, &rb) != nil {
		return false
	}
	ra.Since, rb.Since = time.Time{}, time.Time{}
	ja, _ := json.Marshal(ra)
	jb, _ := json.Marshal(rb)
	return string(ja) == string(jb)
}

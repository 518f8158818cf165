package errand

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/errand-go/errand/internal/uuid"
	"github.com/errand-go/errand/internal/wirejson"
)

// Signature is one task invocation on the wire: a registered task name, its
// arguments and the workflow links that follow it. Field and JSON names are
// machinery's, so messages written by machinery's Signature decode here; the
// fields machinery lacks (Attempt, Timeout, Deadline) are additive.
type Signature struct {
	UUID           string       `json:"UUID"`
	Name           string       `json:"Name"`
	RoutingKey     string       `json:"RoutingKey"`     // queue; empty means the server's default queue
	ETA            *time.Time   `json:"ETA"`            // not before this time; nil means now
	GroupUUID      string       `json:"GroupUUID"`      // set on members of a group or chord
	GroupTaskCount int          `json:"GroupTaskCount"` // members in that group
	Args           []Arg        `json:"Args"`           // positional arguments, in call order
	Headers        Headers      `json:"Headers"`        // free-form metadata, passed to hooks
	Priority       uint8        `json:"Priority"`       // higher runs first where the broker orders by priority
	Immutable      bool         `json:"Immutable"`      // true: do not receive the previous task's results
	RetryCount     int          `json:"RetryCount"`     // retries allowed after the first attempt
	RetryTimeout   int          `json:"RetryTimeout"`   // machinery's last Fibonacci delay, in policy units
	OnSuccess      []*Signature `json:"OnSuccess"`      // sent with this task's results appended when it succeeds
	OnError        []*Signature `json:"OnError"`        // sent with the error text prepended when it fails for good
	ChordCallback  *Signature   `json:"ChordCallback"`  // sent once every member of GroupUUID has finished

	// Attempt is the 1-based number of the current attempt: 1 on the first
	// run, 2 on the first retry or snooze. Zero on the wire means 1.
	Attempt int `json:"Attempt,omitempty"`
	// Snoozes is how many times the task snoozed (its function returned
	// [Snooze]): each snooze is an attempt (Attempt counts it) that
	// raises the task's retry bound by one, so snoozes never spend the
	// retries RetryCount allows. Bounded by WorkerConfig.MaxSnoozes.
	Snoozes int `json:"Snoozes,omitempty"`
	// Timeout bounds one attempt: the task's ctx is cancelled after it.
	// Zero means the worker's default (none unless configured).
	Timeout time.Duration `json:"Timeout,omitempty"`
	// Deadline bounds every attempt: after it the task's ctx is cancelled and
	// no further retry is made. Nil means none.
	Deadline *time.Time `json:"Deadline,omitempty"`
	// UniqueKey, when set, makes the task unique while it holds the key:
	// a send of another task with the same key returns an error satisfying
	// errors.Is(err, ErrDuplicate) that names this task's UUID, until
	// this task ends for good (SUCCESS, or FAILURE with no retry left) or
	// UniqueFor has passed since it was sent, whichever comes first. The
	// broker holds the key (driver.Uniquer). Only a task sent on its own
	// or a chain's first task may have one. See docs/flow-control.md.
	UniqueKey string `json:"UniqueKey,omitempty"`
	// UniqueFor is how long UniqueKey may be held at most; required (> 0)
	// with a UniqueKey.
	UniqueFor time.Duration `json:"UniqueFor,omitempty"`

	// madeUUID is the UUID NewSignature made, until the signature is
	// first sent: no state can exist under it yet (see SendTask).
	madeUUID string
}

// Headers carries free-form metadata with a task (trace IDs and the like).
type Headers map[string]any

// Arg is one positional argument. Type names the Go type the producer sent
// (reflect's string form, e.g. "int", "[]string", "main.Point"); Value is any
// JSON-encodable value. After decoding from the wire, Value holds the raw
// JSON (a json.RawMessage) until the worker converts it to the parameter
// type of the registered function.
type Arg struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// UnmarshalJSON keeps Value as raw JSON so it can later be decoded straight
// into the registered function's parameter type, whatever that type is.
func (a *Arg) UnmarshalJSON(b []byte) error {
	if fastArg(a, b, false) {
		return nil
	}
	var w struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	a.Name, a.Type = w.Name, w.Type
	if w.Value == nil {
		a.Value = json.RawMessage("null")
	} else {
		a.Value = w.Value
	}
	return nil
}

// fastArg decodes b into a without reflection when b is the object errand
// writes for an Arg — the keys "name", "type" and "value" exactly, each at
// most once, the two strings without escapes — and reports whether it did;
// anything else (another key or spelling, an escape) is left to
// encoding/json. b is valid JSON (the decoder calling UnmarshalJSON has
// checked it), so the value's end is found by skipping, not validating.
// Value is a copy, b belonging to the caller, unless owned: then b is a
// copy made for a (and its neighbours: fastArgs), and Value is b's bytes,
// capped so that an append to it cannot reach them.
func fastArg(a *Arg, b []byte, owned bool) bool {
	var name, typ string
	var value []byte
	var seen [3]bool
	i := wirejson.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = wirejson.SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			kb, j, ok := wirejson.Plain(b, i)
			if !ok {
				return false
			}
			j = wirejson.SkipSpace(b, j)
			if j >= len(b) || b[j] != ':' {
				return false
			}
			j = wirejson.SkipSpace(b, j+1)
			var k int
			switch string(kb) { // no copy: the compiler compares in place
			case "name":
				v, end, ok := wirejson.Plain(b, j)
				if !ok {
					return false
				}
				k, name, j = 0, string(v), end
			case "type":
				v, end, ok := wirejson.Plain(b, j)
				if !ok {
					return false
				}
				k, typ, j = 1, knownType(v), end
			case "value":
				end := wirejson.SkipValue(b, j)
				if end < 0 || !wirejson.ValidValue(b[j:end]) { // skipped, not checked: b may be invalid (fastArgs)
					return false
				}
				k, value = 2, b[j:end]
				j = end
			default:
				return false
			}
			if seen[k] {
				return false
			}
			seen[k] = true
			j = wirejson.SkipSpace(b, j)
			if j < len(b) && b[j] == ',' {
				i = wirejson.SkipSpace(b, j+1)
				continue
			}
			if j < len(b) && b[j] == '}' {
				i = j + 1
				break
			}
			return false
		}
	}
	if wirejson.SkipSpace(b, i) != len(b) {
		return false
	}
	a.Name, a.Type = name, typ
	switch {
	case value == nil:
		a.Value = json.RawMessage("null")
	case owned:
		a.Value = json.RawMessage(value[:len(value):len(value)])
	default:
		a.Value = json.RawMessage(bytes.Clone(value))
	}
	return true
}

// knownType returns the type name t, without a copy for the common ones.
func knownType(t []byte) string {
	switch string(t) {
	case "int":
		return "int"
	case "int64":
		return "int64"
	case "int32":
		return "int32"
	case "uint":
		return "uint"
	case "uint64":
		return "uint64"
	case "float64":
		return "float64"
	case "string":
		return "string"
	case "bool":
		return "bool"
	case "[]string":
		return "[]string"
	case "[]int":
		return "[]int"
	case "map[string]interface {}":
		return "map[string]interface {}"
	}
	return string(t)
}

// ArgOf returns an Arg for v with its Go type name.
func ArgOf(v any) Arg {
	return Arg{Type: typeName(v), Value: v}
}

// NewSignature returns a signature for the task name with args, each
// converted by ArgOf, and a fresh UUID.
func NewSignature(name string, args ...any) *Signature {
	s := &Signature{UUID: uuid.New(), Name: name}
	s.madeUUID = s.UUID
	if len(args) > 0 {
		s.Args = make([]Arg, 0, len(args))
	}
	for _, a := range args {
		s.Args = append(s.Args, ArgOf(a))
	}
	return s
}

// Copy returns a deep copy of s: arguments, headers and every linked
// signature are copied, so the copy can be changed freely.
func (s *Signature) Copy() *Signature {
	if s == nil {
		return nil
	}
	c := *s
	c.madeUUID = "" // two signatures under one UUID: neither is the first
	c.Args = append([]Arg(nil), s.Args...)
	if s.Headers != nil {
		c.Headers = make(Headers, len(s.Headers))
		for k, v := range s.Headers {
			c.Headers[k] = v
		}
	}
	if s.ETA != nil {
		t := *s.ETA
		c.ETA = &t
	}
	if s.Deadline != nil {
		t := *s.Deadline
		c.Deadline = &t
	}
	c.OnSuccess = copySigs(s.OnSuccess)
	c.OnError = copySigs(s.OnError)
	c.ChordCallback = s.ChordCallback.Copy()
	return &c
}

func copySigs(in []*Signature) []*Signature {
	if in == nil {
		return nil
	}
	out := make([]*Signature, len(in))
	for i, s := range in {
		out[i] = s.Copy()
	}
	return out
}

// attempt returns the 1-based attempt number.
func (s *Signature) attempt() int {
	if s.Attempt < 1 {
		return 1
	}
	return s.Attempt
}

// EncodeSignature returns the wire form of s (JSON).
func EncodeSignature(s *Signature) ([]byte, error) {
	// Written without reflection where it can be (sigencode.go), byte for
	// byte as encoding/json writes it; else by encoding/json.
	if s != nil {
		if b, ok := appendSignature(make([]byte, 0, sigSize(s)), s, 0); ok {
			return b, nil
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("errand: encode task %q: %w", s.Name, err)
	}
	return b, nil
}

// DecodeSignature parses the wire form of a signature. Any error wraps
// ErrBadMessage; a message without a UUID or a task name is malformed too.
func DecodeSignature(b []byte) (*Signature, error) {
	var s Signature
	// What EncodeSignature writes is decoded without reflection
	// (sigdecode.go), which takes valid JSON only; anything else, and any
	// invalid input, by encoding/json.
	if !fastSignature(&s, b) {
		s = Signature{}
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
		}
	}
	if s.UUID == "" || s.Name == "" {
		return nil, fmt.Errorf("%w: missing UUID or Name", ErrBadMessage)
	}
	return &s, nil
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}

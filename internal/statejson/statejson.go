// Package statejson encodes a driver.TaskState as encoding/json does,
// byte for byte, without reflection for the states a worker writes (plain
// strings, UTC times, compact results). The Redis backend writes every
// state through it: the SUCCESS of a carried settle, the PENDING of a
// publish, the states of SetStates.
package statejson

import (
	"encoding/json"
	"time"

	"github.com/errand-go/errand/driver"
)

// Marshal returns json.Marshal(st): the same bytes, or the same error.
func Marshal(st *driver.TaskState) ([]byte, error) {
	return Append(make([]byte, 0, 256), st)
}

// Append appends json.Marshal(st) to b. A state it cannot encode itself
// (a time not in UTC, or out of JSON's range; a result's JSON not compact
// or not plain ASCII) is encoded by encoding/json.
func Append(b []byte, st *driver.TaskState) ([]byte, error) {
	if st == nil {
		return append(b, "null"...), nil
	}
	if out, ok := appendState(b, st); ok {
		return out, nil
	}
	v, err := json.Marshal(st)
	if err != nil {
		return b, err
	}
	return append(b, v...), nil
}

// appendState is Append's fast path; it reports false, b's contents
// beyond len(b) undefined, when st needs encoding/json.
func appendState(b []byte, st *driver.TaskState) ([]byte, bool) {
	b = append(b, `{"task_uuid":`...)
	b = appendString(b, st.TaskUUID)
	b = append(b, `,"task_name":`...)
	b = appendString(b, st.TaskName)
	b = append(b, `,"state":`...)
	b = appendString(b, string(st.State))
	if st.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = appendInt(b, st.Attempt)
	}
	if len(st.Results) > 0 {
		b = append(b, `,"results":[`...)
		for i, r := range st.Results {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = appendString(b, r.Type)
			b = append(b, `,"value":`...)
			switch {
			case r.Value == nil: // json.RawMessage writes null only for nil
				b = append(b, "null"...)
			case len(r.Value) == 0 || !compactASCII(r.Value):
				return b, false // encoding/json's answer (an empty value is its error)
			default:
				b = append(b, r.Value...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if st.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, st.Error)
	}
	if st.ErrorKind != "" {
		b = append(b, `,"error_kind":`...)
		b = appendString(b, st.ErrorKind)
	}
	if st.ErrorDetail != "" {
		b = append(b, `,"error_detail":`...)
		b = appendString(b, st.ErrorDetail)
	}
	var ok bool
	b = append(b, `,"created_at":`...)
	if b, ok = appendTime(b, st.CreatedAt); !ok {
		return b, false
	}
	if !st.StartedAt.IsZero() {
		b = append(b, `,"started_at":`...)
		if b, ok = appendTime(b, st.StartedAt); !ok {
			return b, false
		}
	}
	if !st.FinishedAt.IsZero() {
		b = append(b, `,"finished_at":`...)
		if b, ok = appendTime(b, st.FinishedAt); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			// An escape (encoding/json's, HTML-safe): rare in states.
			v, _ := json.Marshal(s) // a string always encodes
			return append(b, v...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendInt(b []byte, n int) []byte {
	if n < 0 {
		b = append(b, '-')
		// -n overflows for the smallest int: its digits one by one.
		var buf [20]byte
		i := len(buf)
		for {
			i--
			buf[i] = byte('0' - n%10)
			n /= 10
			if n == 0 {
				break
			}
		}
		return append(b, buf[i:]...)
	}
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(b, buf[i:]...)
}

// appendTime appends t as time.Time's MarshalJSON does, when t is in UTC
// and its year has four digits; it reports false otherwise.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if t.Location() != time.UTC {
		return b, false
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

// compactASCII reports whether v is valid JSON that encoding/json's
// compaction leaves as it is: no whitespace, nothing it escapes (<, >, &)
// and only printable ASCII.
func compactASCII(v []byte) bool {
	for _, c := range v {
		if c <= 0x20 || c > 0x7e || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return json.Valid(v)
}

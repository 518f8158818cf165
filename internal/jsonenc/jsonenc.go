// Package jsonenc writes errand's own JSON — the pieces of a Signature's
// wire form and a driver.TaskState — without reflection, byte for byte as
// encoding/json's Marshal writes them (HTML characters, U+2028 and U+2029
// escaped, invalid UTF-8 replaced, floats in ES6 form, times in RFC 3339
// with nanoseconds). What it cannot write so (a value of another type, a
// time outside years 0-9999, a float that is NaN or infinite, raw JSON
// that is not valid) it reports, and the caller encodes the whole value
// with encoding/json instead, so that output and errors stay
// encoding/json's. The fuzz tests compare both encoders byte for byte.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/errand-go/errand/driver"
)

const hex = "0123456789abcdef"

// AppendString appends s as encoding/json writes a string (HTML-escaped).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendTime appends t as its MarshalJSON writes it; false (dst as it
// was) where MarshalJSON fails.
func AppendTime(dst []byte, t time.Time) ([]byte, bool) {
	out, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst, false // out is nil
	}
	return append(out, '"'), true
}

// AppendFloat appends f, of bits 32 or 64, as encoding/json writes it;
// false where it fails (NaN, infinities).
func AppendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// AppendValue appends v, a value of one of the types a task's arguments
// usually have (nil, string, bool, the integer and float types), as
// encoding/json writes it; false for any other type, or a value it
// cannot write.
func AppendValue(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return AppendString(dst, x), true
	case bool:
		return strconv.AppendBool(dst, x), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case float64:
		return AppendFloat(dst, x, 64)
	case float32:
		return AppendFloat(dst, float64(x), 32)
	}
	return dst, false
}

// AppendRaw appends raw JSON as encoding/json writes a json.RawMessage:
// null when nil, else compacted, HTML-escaped; false (dst as it was)
// when raw is not valid JSON.
func AppendRaw(dst []byte, raw []byte) ([]byte, bool) {
	if raw == nil {
		return append(dst, "null"...), true
	}
	if !json.Valid(raw) {
		return dst, false
	}
	if plainRaw(raw) {
		return append(dst, raw...), true
	}
	var c bytes.Buffer
	if json.Compact(&c, raw) != nil {
		return dst, false
	}
	var h bytes.Buffer
	json.HTMLEscape(&h, c.Bytes())
	return append(dst, h.Bytes()...), true
}

// plainRaw reports whether valid JSON raw is written as it is: no
// whitespace (compact removes it between tokens; in a string it stays,
// but such values take the slow path), no HTML characters and no byte
// 0xE2 (U+2028 and U+2029 begin with it) to escape.
func plainRaw(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return true
}

// AppendTaskState appends st as encoding/json's Marshal writes it; false
// (dst as it was) where Marshal would fail or write another way, which
// the caller then calls.
func AppendTaskState(dst []byte, st *driver.TaskState) ([]byte, bool) {
	n := len(dst)
	dst = append(dst, `{"task_uuid":`...)
	dst = AppendString(dst, st.TaskUUID)
	dst = append(dst, `,"task_name":`...)
	dst = AppendString(dst, st.TaskName)
	dst = append(dst, `,"state":`...)
	dst = AppendString(dst, string(st.State))
	if st.Attempt != 0 {
		dst = append(dst, `,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(st.Attempt), 10)
	}
	if len(st.Results) > 0 {
		dst = append(dst, `,"results":[`...)
		for i, r := range st.Results {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":`...)
			dst = AppendString(dst, r.Type)
			dst = append(dst, `,"value":`...)
			var ok bool
			if dst, ok = AppendRaw(dst, r.Value); !ok {
				return dst[:n], false
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	for _, f := range [...]struct{ key, v string }{
		{`,"error":`, st.Error}, {`,"error_kind":`, st.ErrorKind}, {`,"error_detail":`, st.ErrorDetail},
	} {
		if f.v != "" {
			dst = append(dst, f.key...)
			dst = AppendString(dst, f.v)
		}
	}
	var ok bool
	dst = append(dst, `,"created_at":`...)
	if dst, ok = AppendTime(dst, st.CreatedAt); !ok {
		return dst[:n], false
	}
	if !st.StartedAt.IsZero() {
		dst = append(dst, `,"started_at":`...)
		if dst, ok = AppendTime(dst, st.StartedAt); !ok {
			return dst[:n], false
		}
	}
	if !st.FinishedAt.IsZero() {
		dst = append(dst, `,"finished_at":`...)
		if dst, ok = AppendTime(dst, st.FinishedAt); !ok {
			return dst[:n], false
		}
	}
	return append(dst, '}'), true
}

// MarshalTaskState is json.Marshal(st), without reflection where
// AppendTaskState serves.
func MarshalTaskState(st *driver.TaskState) ([]byte, error) {
	if st == nil {
		return json.Marshal(st)
	}
	if b, ok := AppendTaskState(make([]byte, 0, stateSize(st)), st); ok {
		return b, nil
	}
	return json.Marshal(st)
}

// stateSize guesses the length of st's JSON, to size its buffer once.
func stateSize(st *driver.TaskState) int {
	n := 160 + len(st.TaskUUID) + len(st.TaskName) + len(st.Error) + len(st.ErrorKind) + len(st.ErrorDetail)
	for _, r := range st.Results {
		n += 24 + len(r.Type) + len(r.Value)
	}
	return n
}

package wirejson

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// text is what the scanning functions read: the Signature decoder reads
// a message's []byte, the state decoder a string from Redis, each
// without a copy.
type text interface{ string | []byte }

// SkipSpace returns the index of the first byte at or after s[i] that is
// not JSON whitespace.
func SkipSpace[T text](s T, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// Plain reads the JSON string at s[i] when it has no escape and is
// valid UTF-8 (encoding/json would replace what is not), returning its
// text (s's, not a copy) and the index after it.
func Plain[T text](s T, i int) (T, int, bool) {
	var none T
	if i >= len(s) || s[i] != '"' {
		return none, 0, false
	}
	ascii := true
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\' || c < 0x20: // an escape, or a control character JSON refuses
			return none, 0, false
		case c == '"':
			if !ascii && !validUTF8(s[i+1:j]) {
				return none, 0, false
			}
			return s[i+1 : j], j + 1, true
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return none, 0, false
}

func validUTF8[T text](s T) bool {
	switch s := any(s).(type) {
	case string:
		return utf8.ValidString(s)
	case []byte:
		return utf8.Valid(s)
	}
	return false
}

func indexByte[T text](s T, c byte) int {
	switch s := any(s).(type) {
	case string:
		return strings.IndexByte(s, c)
	case []byte:
		return bytes.IndexByte(s, c)
	}
	return -1
}

// SkipValue returns the index after the JSON value at s[i], found by
// skipping strings and nesting, not by validating (the caller checks
// the value, with ValidValue, unless it reads it itself); -1 when a
// string or a nesting does not end. A number or a literal ends at a
// comma, whitespace, or the bracket that closes its container.
func SkipValue[T text](s T, i int) int {
	depth := 0
	for i < len(s) {
		switch s[i] {
		case '"':
			start := i + 1
			for {
				k := indexByte(s[i+1:], '"')
				if k < 0 {
					return -1
				}
				i += 1 + k // at a quote: the string's end unless escaped
				n := 0     // the backslashes right before it
				for p := i - 1; p >= start && s[p] == '\\'; p-- {
					n++
				}
				if n%2 == 0 {
					break
				}
			}
			i++
			if depth == 0 {
				return i
			}
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or literal
			}
			depth--
			i++
			if depth == 0 {
				return i
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}

// ValidValue is json.Valid(v), without encoding/json's scanner for a
// plain string, a number or a literal.
func ValidValue(v []byte) bool {
	switch {
	case len(v) == 0:
		return false
	case v[0] == '"':
		if _, e, ok := Plain(v, 0); ok && e == len(v) {
			return true
		}
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		if validNumber(v) {
			return true
		}
	case string(v) == "true" || string(v) == "false" || string(v) == "null":
		return true
	}
	return json.Valid(v) // anything else, whitespace around it too
}

// validNumber reports whether v is a JSON number:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(v []byte) bool {
	i := 0
	digits := func() bool {
		j := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(v) && v[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	return i == len(v)
}

// Int parses v, all of it, as a JSON integer (no fraction, no exponent,
// at most 18 digits) that fits bits, as encoding/json accepts into an
// integer field; longer ones (rare) are declined.
func Int[T text](v T, bits int) (int64, bool) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	if len(v) > 1 && v[0] == '0' {
		return 0, false // not JSON
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	if bits < 64 && (n < -1<<(bits-1) || n > 1<<(bits-1)-1) {
		return 0, false
	}
	return n, true
}

// UTCTime reads the JSON string at s[i] when it is a time as AppendTime
// writes one in UTC, "2006-01-02T15:04:05[.999999999]Z", valid as
// time.Time's UnmarshalJSON checks it, returning the time and the index
// after the string.
func UTCTime[T text](s T, i int) (time.Time, int, bool) {
	t, end, ok := Plain(s, i)
	if !ok || len(t) < len("2006-01-02T15:04:05Z") || t[len(t)-1] != 'Z' ||
		t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':' {
		return time.Time{}, 0, false
	}
	num := func(a, b int) (int, bool) {
		n := 0
		for k := a; k < b; k++ {
			c := t[k]
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, 0, false
	}
	nsec := 0
	if frac := t[19 : len(t)-1]; len(frac) != 0 {
		digits := len(frac) - 1
		if frac[0] != '.' || digits < 1 || digits > 9 {
			return time.Time{}, 0, false
		}
		n, ok := num(20, len(t)-1)
		if !ok {
			return time.Time{}, 0, false
		}
		for range 9 - digits {
			n *= 10
		}
		nsec = n
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), end, true
}

// daysIn is the number of days in month of year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

package statejson

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/errand-go/errand/driver"
)

// Unmarshal is json.Unmarshal([]byte(data), st): the same state, or the
// same error. What Append writes — every key spelled as TaskState's tags,
// once, no whitespace, strings without escapes, times in UTC (Z) — is
// decoded without reflection (st's strings are data's); anything else by
// encoding/json.
func Unmarshal(data string, st *driver.TaskState) error {
	if fastState(data, st) {
		return nil
	}
	return json.Unmarshal([]byte(data), st)
}

// The fields of a TaskState, as bits of a set.
const (
	kUUID = 1 << iota
	kName
	kState
	kAttempt
	kResults
	kError
	kErrorKind
	kErrorDetail
	kCreatedAt
	kStartedAt
	kFinishedAt
)

// fastState decodes data into st when it is in the form Unmarshal
// decodes itself, and reports whether it did; st is untouched otherwise.
// As encoding/json does, it sets only the fields data has.
func fastState(s string, st *driver.TaskState) bool {
	if len(s) < 2 || s[0] != '{' {
		return false
	}
	var v driver.TaskState
	var seen int
	i := 1
	if s[i] == '}' {
		return i+1 == len(s) // {}: nothing to set
	}
	for {
		key, j, ok := plain(s, i)
		if !ok || j >= len(s) || s[j] != ':' {
			return false
		}
		j++
		var k int
		switch key {
		case "task_uuid":
			k = kUUID
			v.TaskUUID, j, ok = plain(s, j)
		case "task_name":
			k = kName
			v.TaskName, j, ok = plain(s, j)
		case "state":
			k = kState
			var t string
			t, j, ok = plain(s, j)
			v.State = driver.State(t)
		case "error":
			k = kError
			v.Error, j, ok = plain(s, j)
		case "error_kind":
			k = kErrorKind
			v.ErrorKind, j, ok = plain(s, j)
		case "error_detail":
			k = kErrorDetail
			v.ErrorDetail, j, ok = plain(s, j)
		case "attempt":
			k = kAttempt
			v.Attempt, j, ok = integer(s, j)
		case "created_at":
			k = kCreatedAt
			v.CreatedAt, j, ok = utcTime(s, j)
		case "started_at":
			k = kStartedAt
			v.StartedAt, j, ok = utcTime(s, j)
		case "finished_at":
			k = kFinishedAt
			v.FinishedAt, j, ok = utcTime(s, j)
		case "results":
			k = kResults
			v.Results, j, ok = results(s, j)
		default:
			return false
		}
		if !ok || seen&k != 0 {
			return false
		}
		seen |= k
		if j < len(s) && s[j] == ',' {
			i = j + 1
			continue
		}
		if j+1 != len(s) || s[j] != '}' {
			return false
		}
		break
	}
	set := func(k int) bool { return seen&k != 0 }
	if set(kResults) && st.Results != nil {
		return false // encoding/json decodes into the elements already there
	}
	if set(kUUID) {
		st.TaskUUID = v.TaskUUID
	}
	if set(kName) {
		st.TaskName = v.TaskName
	}
	if set(kState) {
		st.State = v.State
	}
	if set(kAttempt) {
		st.Attempt = v.Attempt
	}
	if set(kResults) {
		st.Results = v.Results
	}
	if set(kError) {
		st.Error = v.Error
	}
	if set(kErrorKind) {
		st.ErrorKind = v.ErrorKind
	}
	if set(kErrorDetail) {
		st.ErrorDetail = v.ErrorDetail
	}
	if set(kCreatedAt) {
		st.CreatedAt = v.CreatedAt
	}
	if set(kStartedAt) {
		st.StartedAt = v.StartedAt
	}
	if set(kFinishedAt) {
		st.FinishedAt = v.FinishedAt
	}
	return true
}

// plain reads the JSON string at s[i] when it has no escape and is valid
// UTF-8, returning its text (s's) and the index after it.
func plain(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	ascii := true
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\' || c < 0x20:
			return "", 0, false
		case c == '"':
			t := s[i+1 : j]
			if !ascii && !utf8.ValidString(t) {
				return "", 0, false
			}
			return t, j + 1, true
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", 0, false
}

// integer reads the JSON integer at s[i] (no fraction, no exponent, at
// most 18 digits: it fits an int).
func integer(s string, i int) (int, int, bool) {
	j := i
	if j < len(s) && s[j] == '-' {
		j++
	}
	start := j
	n := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		n = n*10 + int(s[j]-'0')
		j++
	}
	digits := j - start
	if digits == 0 || digits > 18 || (digits > 1 && s[start] == '0') {
		return 0, 0, false
	}
	if j < len(s) && (s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
		return 0, 0, false
	}
	if s[i] == '-' {
		n = -n
	}
	return n, j, true
}

// utcTime reads the JSON string at s[i] when it is a time as Append
// writes one, "2006-01-02T15:04:05[.999999999]Z", valid as time.Time's
// UnmarshalJSON checks it.
func utcTime(s string, i int) (time.Time, int, bool) {
	t, end, ok := plain(s, i)
	if !ok || len(t) < len("2006-01-02T15:04:05Z") || t[len(t)-1] != 'Z' ||
		t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':' {
		return time.Time{}, 0, false
	}
	num := func(a, b int) (int, bool) {
		n := 0
		for _, c := range []byte(t[a:b]) {
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
	if frac := t[19 : len(t)-1]; frac != "" {
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

// results reads the JSON array of results at s[i]: objects with the keys
// "type" (a plain string) and "value" (any JSON value but null, copied).
func results(s string, i int) ([]driver.Result, int, bool) {
	if i >= len(s) || s[i] != '[' {
		return nil, 0, false
	}
	rs := []driver.Result{}
	i++
	if i < len(s) && s[i] == ']' {
		return rs, i + 1, true
	}
	for {
		if i >= len(s) || s[i] != '{' {
			return nil, 0, false
		}
		i++
		var r driver.Result
		var seenType, seenValue bool
		for {
			key, j, ok := plain(s, i)
			if !ok || j >= len(s) || s[j] != ':' {
				return nil, 0, false
			}
			j++
			switch {
			case key == "type" && !seenType:
				seenType = true
				if r.Type, j, ok = plain(s, j); !ok {
					return nil, 0, false
				}
			case key == "value" && !seenValue:
				seenValue = true
				end := valueEnd(s, j)
				if end <= j || s[j:end] == "null" || space(s[j]) || space(s[end-1]) {
					return nil, 0, false // encoding/json's value has no space around it
				}
				r.Value = json.RawMessage(s[j:end])
				if !json.Valid(r.Value) {
					return nil, 0, false
				}
				j = end
			default:
				return nil, 0, false
			}
			if j < len(s) && s[j] == ',' {
				i = j + 1
				continue
			}
			if j < len(s) && s[j] == '}' {
				i = j + 1
				break
			}
			return nil, 0, false
		}
		rs = append(rs, r)
		if i < len(s) && s[i] == ',' {
			i++
			continue
		}
		if i < len(s) && s[i] == ']' {
			return rs, i + 1, true
		}
		return nil, 0, false
	}
}

// space reports whether c is JSON whitespace.
func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// valueEnd returns the index after the JSON value at s[i], found by
// skipping strings and nesting (the caller validates it), or -1.
func valueEnd(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"':
			for j++; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return -1
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return j // the end of the enclosing object
			}
			if depth == 0 {
				return j + 1
			}
		case ',':
			if depth == 0 {
				return j
			}
		}
	}
	if depth == 0 {
		return len(s)
	}
	return -1
}

package statejson

import (
	"encoding/json"
	"strconv"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/wirejson"
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
	kProgress
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
		key, j, ok := wirejson.Plain(s, i)
		if !ok || j >= len(s) || s[j] != ':' {
			return false
		}
		j++
		var k int
		switch key {
		case "task_uuid":
			k = kUUID
			v.TaskUUID, j, ok = wirejson.Plain(s, j)
		case "task_name":
			k = kName
			v.TaskName, j, ok = wirejson.Plain(s, j)
		case "state":
			k = kState
			var t string
			t, j, ok = wirejson.Plain(s, j)
			v.State = driver.State(t)
		case "error":
			k = kError
			v.Error, j, ok = wirejson.Plain(s, j)
		case "error_kind":
			k = kErrorKind
			v.ErrorKind, j, ok = wirejson.Plain(s, j)
		case "error_detail":
			k = kErrorDetail
			v.ErrorDetail, j, ok = wirejson.Plain(s, j)
		case "attempt":
			k = kAttempt
			v.Attempt, j, ok = integer(s, j)
		case "created_at":
			k = kCreatedAt
			v.CreatedAt, j, ok = wirejson.UTCTime(s, j)
		case "started_at":
			k = kStartedAt
			v.StartedAt, j, ok = wirejson.UTCTime(s, j)
		case "finished_at":
			k = kFinishedAt
			v.FinishedAt, j, ok = wirejson.UTCTime(s, j)
		case "results":
			k = kResults
			v.Results, j, ok = results(s, j)
		case "progress":
			k = kProgress
			v.Progress, j, ok = raw(s, j)
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
	if set(kProgress) {
		st.Progress = v.Progress
	}
	return true
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
			key, j, ok := wirejson.Plain(s, i)
			if !ok || j >= len(s) || s[j] != ':' {
				return nil, 0, false
			}
			j++
			switch {
			case key == "type" && !seenType:
				seenType = true
				if r.Type, j, ok = wirejson.Plain(s, j); !ok {
					return nil, 0, false
				}
			case key == "value" && !seenValue:
				seenValue = true
				end := wirejson.SkipValue(s, j)
				if end <= j || s[j:end] == "null" {
					return nil, 0, false // no value (a space before it), or null: encoding/json's
				}
				r.Value = json.RawMessage(s[j:end])
				if !wirejson.ValidValue(r.Value) {
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

// raw reads the JSON value at s[i] (any but null, which encoding/json
// decodes on its own terms) as it is, a copy.
func raw(s string, i int) (json.RawMessage, int, bool) {
	end := wirejson.SkipValue(s, i)
	if end <= i || s[i:end] == "null" {
		return nil, 0, false
	}
	v := json.RawMessage(s[i:end])
	if !wirejson.ValidValue(v) {
		return nil, 0, false
	}
	return v, end, true
}

// integer reads the JSON integer at s[i] that fits an int, returning
// the index after it.
func integer(s string, i int) (int, int, bool) {
	end := wirejson.SkipValue(s, i)
	if end <= i {
		return 0, 0, false
	}
	n, ok := wirejson.Int(s[i:end], strconv.IntSize)
	return int(n), end, ok
}

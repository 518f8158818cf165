// Package statejson encodes a driver.TaskState as encoding/json does,
// byte for byte, and decodes what it writes, without reflection (with
// package wirejson's helpers, which the Signature codec uses too). The Redis backend writes every
// state through it: the SUCCESS of a carried settle, the PENDING of a
// publish, the states of SetStates. A state's Progress is written as
// encoding/json writes a json.RawMessage (compacted, HTML-escaped: a value
// json.Marshal wrote comes back byte for byte) and read back as it is.
package statejson

import (
	"encoding/json"
	"strconv"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/wirejson"
)

// Marshal returns json.Marshal(st): the same bytes, or the same error.
func Marshal(st *driver.TaskState) ([]byte, error) {
	return Append(make([]byte, 0, 256), st)
}

// Append appends json.Marshal(st) to b. A state it cannot encode itself
// (a time out of JSON's range; a result's JSON not valid) is encoded by
// encoding/json.
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
	b = wirejson.AppendString(b, st.TaskUUID)
	b = append(b, `,"task_name":`...)
	b = wirejson.AppendString(b, st.TaskName)
	b = append(b, `,"state":`...)
	b = wirejson.AppendString(b, string(st.State))
	if st.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(st.Attempt), 10)
	}
	if len(st.Results) > 0 {
		b = append(b, `,"results":[`...)
		for i, r := range st.Results {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = wirejson.AppendString(b, r.Type)
			b = append(b, `,"value":`...)
			var ok bool
			if b, ok = wirejson.AppendRaw(b, r.Value); !ok {
				return b, false // encoding/json's answer (an empty value is its error)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if st.Error != "" {
		b = append(b, `,"error":`...)
		b = wirejson.AppendString(b, st.Error)
	}
	if st.ErrorKind != "" {
		b = append(b, `,"error_kind":`...)
		b = wirejson.AppendString(b, st.ErrorKind)
	}
	if st.ErrorDetail != "" {
		b = append(b, `,"error_detail":`...)
		b = wirejson.AppendString(b, st.ErrorDetail)
	}
	var ok bool
	b = append(b, `,"created_at":`...)
	if b, ok = wirejson.AppendTime(b, st.CreatedAt); !ok {
		return b, false
	}
	if !st.StartedAt.IsZero() {
		b = append(b, `,"started_at":`...)
		if b, ok = wirejson.AppendTime(b, st.StartedAt); !ok {
			return b, false
		}
	}
	if !st.FinishedAt.IsZero() {
		b = append(b, `,"finished_at":`...)
		if b, ok = wirejson.AppendTime(b, st.FinishedAt); !ok {
			return b, false
		}
	}
	if len(st.Progress) > 0 {
		b = append(b, `,"progress":`...)
		if b, ok = wirejson.AppendRaw(b, st.Progress); !ok {
			return b, false // encoding/json's answer (its error for JSON not valid)
		}
	}
	return append(b, '}'), true
}

package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
)

// FuzzAppendTaskState: AppendTaskState writes what json.Marshal writes,
// byte for byte, or declines (and MarshalTaskState then is json.Marshal).
func FuzzAppendTaskState(f *testing.F) {
	f.Add("3b1c3c8e-6a3e-4d2c-9a43-5b6e0d4d3f10", "add", "PENDING", 1, "", "", "", "", "", int64(1764170000123456789), int64(0), int64(0), "")
	f.Add("id", "na<me>&", "SUCCESS", 3, "int", "42", "", "", "", int64(1), int64(2), int64(3), "Europe/Paris")
	f.Add("\u2028\xff\x01", "t\"\\", "FAILURE", -2, "[]string", ` [ "a" , "<b>" ] `, "boom\n", "panic", `{"k":1}`, int64(-62135596800000000), int64(253402300799999999), int64(0), "")
	f.Add("x", "y", "RETRY", 0, "x", "not json", "e", "", "", int64(253402300800000000), int64(0), int64(0), "")
	f.Add("x", "y", "STARTED", 0, "s", "\"\u2029\"", "", "", "", int64(5), int64(0), int64(0), "America/St_Johns")
	f.Fuzz(func(t *testing.T, id, name, state string, attempt int, rtype, rvalue, errText, kind, detail string, created, started, finished int64, zone string) {
		loc := time.UTC
		if zone != "" {
			if l, err := time.LoadLocation(zone); err == nil {
				loc = l
			}
		}
		at := func(ns int64) time.Time {
			if ns == 0 {
				return time.Time{}
			}
			return time.Unix(0, ns).In(loc)
		}
		st := &driver.TaskState{TaskUUID: id, TaskName: name, State: driver.State(state), Attempt: attempt,
			Error: errText, ErrorKind: kind, ErrorDetail: detail,
			CreatedAt: at(created), StartedAt: at(started), FinishedAt: at(finished)}
		if rtype != "" {
			st.Results = []driver.Result{{Type: rtype, Value: json.RawMessage(rvalue)}, {Type: "nil"}}
		}
		want, wantErr := json.Marshal(st)
		got, ok := AppendTaskState([]byte("prefix"), st)
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("AppendTaskState declined but left %q", got)
			}
		} else if wantErr != nil || !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("AppendTaskState(%+v)\n got %s\nwant %s (err %v)", st, got[len("prefix"):], want, wantErr)
		}
		m, err := MarshalTaskState(st)
		if !bytes.Equal(m, want) || (err == nil) != (wantErr == nil) {
			t.Fatalf("MarshalTaskState = %s, %v; json.Marshal = %s, %v", m, err, want, wantErr)
		}
	})
}

// FuzzAppendValue: AppendValue writes each basic type as json.Marshal
// does, byte for byte, and declines what json.Marshal refuses.
func FuzzAppendValue(f *testing.F) {
	f.Add("a<b>&\u2028\xfe\"\\\n\x00", int64(-1), uint64(1<<63), 1.5, float32(3.25), true)
	f.Add("", int64(math.MaxInt64), uint64(0), 1e21, float32(1e-7), false)
	f.Add("é", int64(math.MinInt64), uint64(255), 1e-7, float32(1e21), false)
	f.Add("x", int64(0), uint64(7), math.Inf(1), float32(math.NaN()), false)
	f.Add("x", int64(0), uint64(7), 123456789.125, float32(-0.0), false)
	f.Fuzz(func(t *testing.T, s string, i int64, u uint64, f64 float64, f32 float32, b bool) {
		for _, v := range []any{nil, s, b, int(i), i, int32(i), int16(i), int8(i), uint(u), u, uint32(u), uint16(u), uint8(u), f64, f32, -f64, f64 / 3, float32(f64)} {
			want, wantErr := json.Marshal(v)
			got, ok := AppendValue(nil, v)
			if !ok {
				if wantErr == nil {
					t.Fatalf("AppendValue(%T %v) declined; json.Marshal writes %s", v, v, want)
				}
				continue
			}
			if wantErr != nil || !bytes.Equal(got, want) {
				t.Fatalf("AppendValue(%T %v) = %s; json.Marshal = %s, %v", v, v, got, want, wantErr)
			}
		}
		if _, ok := AppendValue(nil, []int{1}); ok {
			t.Fatal("AppendValue took a slice; want declined (encoding/json's)")
		}
	})
}

// TestAppendRaw: raw JSON as json.Marshal writes a json.RawMessage.
func TestAppendRaw(t *testing.T) {
	for _, raw := range []string{"", "1", ` {"a" : [1, 2]} `, `"<&>"`, `"a b"`, "\"\u2028\"", "nope", "{", `[1,2]`} {
		want, wantErr := json.Marshal(json.RawMessage(raw))
		got, ok := AppendRaw(nil, []byte(raw))
		if ok != (wantErr == nil) || (ok && !bytes.Equal(got, want)) {
			t.Errorf("AppendRaw(%q) = %s, %v; json.Marshal = %s, %v", raw, got, ok, want, wantErr)
		}
	}
}

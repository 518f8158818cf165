package statejson

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
)

// equal checks the promise of Marshal: encoding/json's bytes, or its
// error.
func equal(t *testing.T, st *driver.TaskState) {
	t.Helper()
	want, wantErr := json.Marshal(st)
	got, err := Marshal(st)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Marshal(%+v): error %v; encoding/json's: %v", st, err, wantErr)
	}
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("Marshal(%+v) is not encoding/json's encoding:\n got %s\nwant %s", st, got, want)
	}
	// Append keeps what b holds.
	pre := []byte("x")
	got, err = Append(pre, st)
	if err == nil && (string(got[:1]) != "x" || !bytes.Equal(got[1:], want)) {
		t.Fatalf("Append(%q, %+v) = %s; want x%s", pre, st, got, want)
	}
}

func TestMarshalIsEncodingJSON(t *testing.T) {
	now := time.Date(2026, 11, 26, 16, 0, 0, 123456789, time.UTC)
	paris := time.FixedZone("CET", 3600)
	cases := []*driver.TaskState{
		nil,
		{},
		{TaskUUID: "u", TaskName: "n", State: driver.StateSuccess, Attempt: 1, CreatedAt: now, StartedAt: now, FinishedAt: now,
			Results: []driver.Result{{Type: "int64", Value: json.RawMessage(`42`)}, {Type: "string", Value: json.RawMessage(`"x"`)}}},
		{TaskUUID: "u", State: driver.StatePending, CreatedAt: now.Truncate(time.Second)},
		{TaskUUID: "u", State: driver.StateStarted, Attempt: -3, CreatedAt: now, StartedAt: now},
		{TaskUUID: "u", Attempt: math.MinInt, CreatedAt: now},
		{TaskUUID: "u", Attempt: math.MaxInt, CreatedAt: now},
		{TaskUUID: "u", State: driver.StateFailure, Error: `boom: "quoted" <b>&amp;</b> \ tab	nl
 é ✓ \u2028 ` + "\u2028\u2029\x00\x1f\x7f\xff" + ` end`, ErrorKind: "panic", ErrorDetail: `{"a":1}`, CreatedAt: now, FinishedAt: now},
		{TaskUUID: "u", CreatedAt: now.In(paris)},
		{TaskUUID: "u", CreatedAt: now.In(time.Local)},
		{TaskUUID: "u", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{TaskUUID: "u", CreatedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{TaskUUID: "u", CreatedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{TaskUUID: "u", CreatedAt: time.Time{}, StartedAt: time.Time{}.Add(1)},
		{TaskUUID: "u", CreatedAt: time.Now()}, // a monotonic reading, the local zone
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{}}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{Type: "empty", Value: json.RawMessage{}}}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{Type: "[]int", Value: json.RawMessage(` [1, 2] `)}}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{Type: "string", Value: json.RawMessage(`"<a> & é"`)}}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{Type: "x", Value: json.RawMessage(`{"a":[1,{"b":null}],"c":"d"}`)}}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{Type: "bad", Value: json.RawMessage(`{`)}}},
		{TaskUUID: "u", CreatedAt: now, Results: []driver.Result{{Type: "bad", Value: json.RawMessage(`1 2`)}}},
		{TaskUUID: "u", State: driver.StateStarted, CreatedAt: now, StartedAt: now, Progress: json.RawMessage(`{"done":3,"of":10,"note":"<é>"}`)},
		{TaskUUID: "u", State: driver.StateSuccess, CreatedAt: now, FinishedAt: now, Progress: json.RawMessage(` [1, "a b"] `)},
		{TaskUUID: "u", CreatedAt: now, Progress: json.RawMessage(`"\u2028 & \u003c"`)},
		{TaskUUID: "u", CreatedAt: now, Progress: json.RawMessage(`null`)},
		{TaskUUID: "u", CreatedAt: now, Progress: json.RawMessage{}},
		{TaskUUID: "u", CreatedAt: now, Progress: json.RawMessage(`{`)},
	}
	for _, st := range cases {
		equal(t, st)
	}
}

func FuzzMarshal(f *testing.F) {
	f.Add("u", "n", "SUCCESS", 1, "int64", []byte(`42`), "", int64(1764172800123456789), int64(0))
	f.Add("u<", "n\"", "FAILURE", -1, "", []byte(` "x" `), "é\x00", int64(-62135596800000000), int64(3600))
	f.Fuzz(func(t *testing.T, uuid, name, state string, attempt int, typ string, value []byte, errText string, nanos, offset int64) {
		at := time.Unix(0, nanos).UTC()
		if offset != 0 {
			at = at.In(time.FixedZone("z", int(offset%100000)))
		}
		st := &driver.TaskState{TaskUUID: uuid, TaskName: name, State: driver.State(state), Attempt: attempt, Error: errText,
			CreatedAt: at, StartedAt: at.Add(time.Second), FinishedAt: at.Add(time.Duration(attempt))}
		if typ != "" || len(value) > 0 {
			st.Results = []driver.Result{{Type: typ, Value: value}}
		}
		if attempt%2 != 0 {
			st.Progress = value
		}
		equal(t, st)
	})
}

func BenchmarkMarshal(b *testing.B) {
	now := time.Now().UTC()
	st := &driver.TaskState{TaskUUID: "8a4d9f0e-2f0c-4e53-9a4e-6a1f0c2b7d11", TaskName: "noop", State: driver.StateSuccess, Attempt: 1,
		CreatedAt: now, StartedAt: now, FinishedAt: now}
	b.Run("statejson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package statejson

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/errand-go/errand/driver"
)

// sameDecode checks the promise of Unmarshal: encoding/json's state (into
// a zero state and into one already holding values), or its error.
func sameDecode(t *testing.T, data string) {
	t.Helper()
	prefilled := func() *driver.TaskState {
		return &driver.TaskState{TaskUUID: "old", Attempt: 7, Error: "old", CreatedAt: time.Unix(1, 0).UTC(),
			Results: []driver.Result{{Type: "old", Value: json.RawMessage(`1`)}}}
	}
	for _, fresh := range []func() *driver.TaskState{func() *driver.TaskState { return new(driver.TaskState) }, prefilled} {
		want, got := fresh(), fresh()
		wantErr := json.Unmarshal([]byte(data), want)
		err := Unmarshal(data, got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Unmarshal(%q): error %v; encoding/json's: %v", data, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("Unmarshal(%q) is not encoding/json's decoding:\n got %+v\nwant %+v", data, got, want)
		}
	}
}

var decodeSeeds = []string{
	`{}`, `{ }`, `null`, `[]`, `{"task_uuid":"u"}`, `{"task_uuid":"u","task_uuid":"v"}`, `{"TASK_UUID":"u"}`,
	`{"task_uuid":"u","task_name":"n","state":"SUCCESS","attempt":2,"results":[{"type":"int","value":42},{"type":"s","value":"x"}],"created_at":"2026-11-26T16:00:00.123456789Z","started_at":"2026-11-26T16:00:00Z","finished_at":"2026-11-26T16:00:00.5Z"}`,
	`{"task_uuid":"u","attempt":-0}`, `{"attempt":01}`, `{"attempt":1.0}`, `{"attempt":1e2}`, `{"attempt":99999999999999999999}`, `{"attempt":null}`,
	`{"task_uuid":null}`, `{"error":"a\"b"}`, `{"error":"é✓"}`, "{\"error\":\"\xff\"}", "{\"error\":\"a\tb\"}",
	`{"created_at":"2026-02-29T00:00:00Z"}`, `{"created_at":"2024-02-29T00:00:00Z"}`, `{"created_at":"2026-13-01T00:00:00Z"}`,
	`{"created_at":"2026-11-26T24:00:00Z"}`, `{"created_at":"2026-11-26T16:00:60Z"}`, `{"created_at":"2026-11-26T16:00:00.Z"}`,
	`{"created_at":"2026-11-26T16:00:00.1234567891Z"}`, `{"created_at":"2026-11-26T16:00:00+01:00"}`, `{"created_at":"2026-11-26t16:00:00z"}`,
	`{"created_at":null}`, `{"created_at":"0000-01-01T00:00:00Z"}`, `{"created_at":"2026-11-26 16:00:00Z"}`,
	`{"results":[]}`, `{"results":null}`, `{"results":[{}]}`, `{"results":[{"type":"t"}]}`, `{"results":[{"value":null}]}`,
	`{"results":[{"value":{"a":[1,"]}"]}}]}`, `{"results":[{"value":[1,2}]}`, `{"results":[{"value":tru}]}`, `{"results":[{"value":1,"value":2}]}`,
	`{"results":[{"value": 5}]}`, `{"results":[{"value":5 }]}`, "{\"results\":[{\"value\":\n[1]\t,\"type\":\"t\"}]}",
	`{"progress":{"done":1}}`, `{"progress":null}`, `{"progress":[1, 2]}`, `{"progress":"x","progress":1}`, `{"progress":tru}`, `{"progress": 1}`,
	`{"task_uuid":"u","state":"STARTED","created_at":"2026-11-26T16:00:00Z","started_at":"2026-11-26T16:00:00Z","progress":{"a":"<b>","c":[1,{"d":null}]}}`,
	`{"unknown":1}`, `{"task_uuid":"u"} `, `{"task_uuid":"u",}`, `{"task_uuid":"u"`, `{"task_uuid":"u"}x`, ``,
}

func TestUnmarshalIsEncodingJSON(t *testing.T) {
	for _, s := range decodeSeeds {
		sameDecode(t, s)
	}
	// What Marshal writes comes back as it was, by the fast path.
	now := time.Now().UTC()
	st := &driver.TaskState{TaskUUID: "u", TaskName: "n", State: driver.StateSuccess, Attempt: 3, CreatedAt: now, StartedAt: now, FinishedAt: now,
		Results: []driver.Result{{Type: "int", Value: json.RawMessage(`42`)}}, Error: "e", ErrorKind: "k", ErrorDetail: "d",
		Progress: json.RawMessage(`{"done":3,"of":10}`)}
	b, err := Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	sameDecode(t, string(b))
	var got driver.TaskState
	if !fastState(string(b), &got) {
		t.Fatalf("%s: not decoded by the fast path", b)
	}
	if !reflect.DeepEqual(&got, st) {
		t.Fatalf("%s decoded as %+v, want %+v (every field, Progress byte for byte)", b, &got, st)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { sameDecode(t, s) })
}

func BenchmarkUnmarshal(b *testing.B) {
	now := time.Now().UTC()
	v, _ := Marshal(&driver.TaskState{TaskUUID: "8a4d9f0e-2f0c-4e53-9a4e-6a1f0c2b7d11", TaskName: "noop", State: driver.StatePending, CreatedAt: now})
	s := string(v)
	b.Run("statejson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var st driver.TaskState
			if err := Unmarshal(s, &st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var st driver.TaskState
			if err := json.Unmarshal([]byte(s), &st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

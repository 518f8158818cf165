package errand

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

type plainName string

type plainLevel int8

type textNumber int

func (n textNumber) MarshalText() ([]byte, error) { return []byte("n"), nil }

// TestResultEncodingIsEncodingJSON: a task's results of integer, bool and
// string types are encoded without encoding/json exactly as it encodes
// them, and a type with an encoding of its own is left to it.
func TestResultEncodingIsEncodingJSON(t *testing.T) {
	values := []any{
		0, -1, math.MaxInt64, math.MinInt64, int8(-128), int16(7), int32(-7), uint(0), uint8(255), uint16(9), uint32(math.MaxUint32),
		uint64(math.MaxUint64), uintptr(3), true, false, "", "plain", `q"uote`, `back\slash`, "<b>&amp;</b>", "tab\tnl\n",
		"é ✓", "\u2028\u2029", "\x00\x1f\x7f", "\xff bad utf-8", plainName("x<y"), plainLevel(-3), time.Duration(5),
	}
	for _, v := range values {
		rv := reflect.ValueOf(v)
		if !plainKind(rv.Type()) {
			t.Errorf("%T is written by encoding/json as plain JSON; want it on the fast path", v)
			continue
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendPlain(nil, rv); string(got) != string(want) {
			t.Errorf("result %#v (%T) encoded %s; encoding/json: %s", v, v, got, want)
		}
	}
	for _, v := range []any{textNumber(1), 1.5, []int{1}, map[string]int{}, struct{}{}, (*int)(nil), time.Time{}} {
		if plainKind(reflect.TypeOf(v)) {
			t.Errorf("%T took the fast path; want encoding/json (its own encoding, or not a plain kind)", v)
		}
	}
	// Through a registered function.
	tk, err := newTask("r", func() (int64, string, textNumber, error) { return 42, "<x>", 1, nil })
	if err != nil {
		t.Fatal(err)
	}
	rs, err := tk.call(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{Type: "int64", Value: json.RawMessage(`42`)}, {Type: "string", Value: json.RawMessage(`"\u003cx\u003e"`)},
		{Type: "errand.textNumber", Value: json.RawMessage(`"n"`)}}
	if !reflect.DeepEqual(rs, want) {
		t.Errorf("results %s; want %s", rs, want)
	}
}

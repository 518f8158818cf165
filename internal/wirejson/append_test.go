package wirejson

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

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

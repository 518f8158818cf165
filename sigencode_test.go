package errand

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// checkEncode: EncodeSignature writes what encoding/json writes for s,
// byte for byte, and fails where it fails.
func checkEncode(t *testing.T, s *Signature) {
	t.Helper()
	want, wantErr := json.Marshal(s)
	got, err := EncodeSignature(s)
	if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("EncodeSignature(%+v)\n got %s, %v\nwant %s, %v (encoding/json)", s, got, err, want, wantErr)
	}
	if err == nil {
		if fast, ok := appendSignature(nil, s, 0); ok && !bytes.Equal(fast, want) {
			t.Fatalf("appendSignature wrote\n%s\nencoding/json\n%s", fast, want)
		}
	}
}

// TestEncodeSignature: the reflection-free encoder writes encoding/json's
// bytes for errand's forms and for the ones it leaves to encoding/json
// (values of other types, a time it cannot write, a cycle).
func TestEncodeSignature(t *testing.T) {
	eta := time.Date(2026, 11, 26, 14, 0, 0, 123456789, time.UTC)
	dl := time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))
	bad := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	full := NewSignature("a<dd>&", int64(1), "x\u2028\xff", []int{2}, map[string]any{"k": true}, nil, 1.5, float32(1e-7), uint8(7),
		json.RawMessage(` {"a" : "<b>"} `), time.Second, struct{ A int }{3})
	full.RoutingKey, full.GroupUUID, full.GroupTaskCount = "q", "g", 3
	full.ETA, full.Deadline = &eta, &dl
	full.Headers = Headers{"trace": "abc", "n": 2.0, "nested": map[string]any{"a": []any{1.0, "b"}}}
	full.Priority, full.Immutable, full.RetryCount, full.RetryTimeout = 255, true, 7, -2
	full.Attempt, full.Snoozes, full.Timeout, full.UniqueKey, full.UniqueFor = 3, 1, 5*time.Second, "uk", time.Minute
	full.OnSuccess = []*Signature{NewSignature("next", "é"), nil}
	full.OnError = []*Signature{NewSignature("onerr")}
	full.ChordCallback = NewSignature("cb", 1)
	full.ChordCallback.OnSuccess = []*Signature{NewSignature("deep")}
	empty := NewSignature("none")
	empty.Args, empty.OnSuccess, empty.Headers = []Arg{}, []*Signature{}, Headers{}
	late := NewSignature("late")
	late.ETA = &bad
	nan := NewSignature("nan", math.NaN())
	ch := NewSignature("chan", make(chan int))
	cyc := NewSignature("cycle")
	cyc.ChordCallback = cyc
	var nilSig *Signature
	for _, s := range []*Signature{NewSignature("noop", int64(1), int64(2)), NewSignature("bare"), full, empty, late, nan, ch, cyc, nilSig, {}} {
		checkEncode(t, s)
	}
}

// FuzzEncodeSignature: for any signature encoding/json decodes from the
// fuzzer's bytes, and for signatures built from fuzzed fields and
// argument values of every basic type, EncodeSignature writes what
// encoding/json writes, byte for byte.
func FuzzEncodeSignature(f *testing.F) {
	for _, in := range fastSigSeeds {
		f.Add([]byte(in), "", int64(0), 0.0, uint8(0))
	}
	f.Add([]byte(`{}`), "a<\u2029\xfe", int64(-1)<<40, 1e21, uint8(255))
	f.Add([]byte(`{"UUID":"u","Name":"n","Args":[{"name":"a","type":"int","value":1}]}`), "é\"\\\x01", int64(math.MaxInt64), -1e-7, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, s string, i int64, fl float64, p uint8) {
		var dec Signature
		if json.Unmarshal(b, &dec) == nil {
			checkEncode(t, &dec)
		}
		eta := time.Unix(0, i).In(time.FixedZone("z", int(p)*60))
		sig := &Signature{UUID: s, Name: s + "n", RoutingKey: s, GroupUUID: s, GroupTaskCount: int(i), Priority: p,
			Immutable: p&1 == 1, RetryCount: int(i >> 3), RetryTimeout: int(p), Attempt: int(i), Snoozes: int(i >> 5), Timeout: time.Duration(i),
			UniqueKey: s, UniqueFor: time.Duration(-i), ETA: &eta, Headers: Headers{s: fl}}
		for _, v := range []any{s, i, fl, float32(fl), p, uint64(i), int32(i), int8(i), uint16(i), p&1 == 0, nil, json.RawMessage(b), []byte(s)} {
			sig.Args = append(sig.Args, Arg{Name: s, Type: s, Value: v})
		}
		sig.OnSuccess = []*Signature{{UUID: s, Deadline: &eta}, nil}
		sig.ChordCallback = &dec
		checkEncode(t, sig)
	})
}

package errand

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestFastSignatureRoundTrip: whatever EncodeSignature writes, the
// reflection-free decoder takes (no fallback) and decodes to what
// encoding/json decodes.
func TestFastSignatureRoundTrip(t *testing.T) {
	eta := time.Date(2026, 11, 26, 14, 0, 0, 123456789, time.UTC)
	dl := time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))
	full := NewSignature("add", int64(1), "x", []int{2}, map[string]any{"k": true}, nil, 1.5)
	full.RoutingKey, full.GroupUUID, full.GroupTaskCount = "q", "g", 3
	full.ETA, full.Deadline = &eta, &dl
	full.Headers = Headers{"trace": "abc", "n": 2.0, "nested": map[string]any{"a": []any{1.0, "b"}}}
	full.Priority, full.Immutable, full.RetryCount, full.RetryTimeout = 255, true, 7, -2
	full.Attempt, full.Snoozes, full.Timeout, full.UniqueKey, full.UniqueFor = 3, 1, 5*time.Second, "uk", time.Minute
	full.OnSuccess = []*Signature{NewSignature("next", "é"), NewSignature("other")}
	full.OnError = []*Signature{NewSignature("onerr")}
	full.ChordCallback = NewSignature("cb", 1)
	full.ChordCallback.OnSuccess = []*Signature{NewSignature("deep")}
	empty := NewSignature("none")
	empty.Args, empty.OnSuccess = []Arg{}, []*Signature{}
	for _, s := range []*Signature{NewSignature("noop", int64(1), int64(2)), NewSignature("bare"), full, empty} {
		b, err := EncodeSignature(s)
		if err != nil {
			t.Fatal(err)
		}
		var fast Signature
		if !fastSignature(&fast, b) {
			t.Fatalf("fast path refused what EncodeSignature wrote: %s", b)
		}
		var slow Signature
		if err := json.Unmarshal(b, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&fast, &slow) {
			t.Fatalf("%s:\nfast %+v\nencoding/json %+v", b, fast, slow)
		}
		dec, err := DecodeSignature(b)
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := EncodeSignature(dec)
		if string(b2) != string(b) {
			t.Fatalf("round trip changed the wire form:\n%s\n%s", b, b2)
		}
	}
}

// TestFastSignatureSeeds: on the seeds (errand's forms and forms it
// leaves to encoding/json), the fast path agrees with encoding/json.
func TestFastSignatureSeeds(t *testing.T) {
	for _, in := range fastSigSeeds {
		checkFastSignature(t, []byte(in))
	}
}

// FuzzFastSignature: on any input, valid JSON or not, the reflection-free
// decoder either declines or gives exactly what encoding/json gives.
func FuzzFastSignature(f *testing.F) {
	for _, in := range fastSigSeeds {
		f.Add([]byte(in))
	}
	b, _ := EncodeSignature(NewSignature("add", 1, "x", []int{2}, map[string]any{"k": true}))
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFastSignature(t, b)
	})
}

var fastSigSeeds = []string{
	`{"UUID":"u","Name":"n","RoutingKey":"","ETA":null,"GroupUUID":"","GroupTaskCount":0,"Args":[{"name":"","type":"int64","value":1}],"Headers":null,"Priority":0,"Immutable":false,"RetryCount":0,"RetryTimeout":0,"OnSuccess":null,"OnError":null,"ChordCallback":null}`,
	`{"UUID":"u","Name":"n","ETA":"2026-11-26T14:00:00.5+01:00","Deadline":"2026-11-26T14:00:00Z","Attempt":2,"Snoozes":1,"Timeout":1000,"UniqueKey":"k","UniqueFor":-5}`,
	`{"UUID":"u","Name":"n","OnSuccess":[{"UUID":"v","Name":"m","ChordCallback":{"UUID":"w","Name":"c"}}],"OnError":[]}`,
	`{"UUID":"u","Name":"n","OnSuccess":[null]}`,
	`{"UUID":"u","Name":"n","Args":[null]}`,
	`{"UUID":"u","Name":"n","Args":[]}`,
	`{"UUID":"u","Name":"n","Headers":{"a":1,"b":[true,null]}}`,
	`{"UUID":"u","Name":"n","Headers":{}}`,
	`{"uuid":"u","Name":"n"}`,
	`{"UUID":"u","UUID":"v","Name":"n"}`,
	`{"UUID":"u\u0041","Name":"n"}`,
	`{"UUID":"u","Name":"n","Priority":256}`,
	`{"UUID":"u","Name":"n","Priority":-1}`,
	`{"UUID":"u","Name":"n","Priority":1.0}`,
	`{"UUID":"u","Name":"n","RetryCount":1e2}`,
	`{"UUID":"u","Name":"n","RetryCount":99999999999999999999}`,
	`{"UUID":"u","Name":"n","Immutable":null,"RetryCount":null,"UUID2":1}`,
	`{"UUID":"u","Name":"n","Immutable":"true"}`,
	`{"UUID":"u","Name":"n","ETA":"not a time"}`,
	`{"UUID":"u","Name":"n","ETA":5}`,
	`{"UUID":1,"Name":"n"}`,
	`{"UUID":"u","Name":"n","Args":{"name":"x"}}`,
	`{"UUID":"u","Name":"n","ChordCallback":[]}`,
	` { "UUID" : "u" , "Name" : "n" } `,
	`{}`,
	`null`,
	`[1]`,
	`{"UUID":"u","Name":"n","Extra":{"UUID":"x"}}`,
	// Not JSON: declined (DecodeSignature no longer checks it first).
	`{"UUID":"u","Name":"n","Attempt":01}`,
	`{"UUID":"u","Name":"n","Attempt":-01}`,
	"{\"UUID\":\"u\x01\",\"Name\":\"n\"}",
	`{"UUID":"u","Name":"n","Args":[{"name":"","type":"int","value":[1}}]}`,
	`{"UUID":"u","Name":"n","Args":[{"name":"","type":"int","value":tru}]}`,
	`{"UUID":"u","Name":"n","Args":[{"name":"","type":"int","value":1]]}`,
	`{"UUID":"u","Name":"n","Headers":{"a":1]}`,
	`{"UUID":"u","Name":"n","OnSuccess":[{"UUID":"v","Name":"m"}}}`,
	`{"UUID":"u","Name":"n","ETA":"2026-11-26T14:00:00Z}`,
	`{"UUID":"u","Name":"n"`,
	`{"UUID":"u","Name":"n"}}`,
	`{"UUID":"u","Name":"n",}`,
	`{"UUID":"u" "Name":"n"}`,
	`{"UUID":"u","Name":"n","Immutable":tru}`,
}

func checkFastSignature(t *testing.T, b []byte) {
	t.Helper()
	var fast Signature
	if !fastSignature(&fast, b) {
		return // left to encoding/json
	}
	var slow Signature
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatalf("%s: fast path took what encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(&fast, &slow) {
		t.Fatalf("%s:\nfast %+v\nencoding/json %+v", b, fast, slow)
	}
}

// FuzzFastScalar: on any valid JSON, decoding an integer or string
// argument without encoding/json either declines or gives what
// encoding/json gives.
func FuzzFastScalar(f *testing.F) {
	for _, in := range []string{`1`, ` -128 `, `128`, `1.0`, `1e2`, `"x"`, `"a\"b"`, `null`, `99999999999999999999`, `"é"`} {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		for _, typ := range []reflect.Type{reflect.TypeFor[int8](), reflect.TypeFor[int](), reflect.TypeFor[int64](), reflect.TypeFor[string](), reflect.TypeFor[time.Duration]()} {
			v, ok := fastScalar(b, typ)
			if !ok {
				continue
			}
			p := reflect.New(typ)
			if err := json.Unmarshal(b, p.Interface()); err != nil {
				t.Fatalf("%s into %s: fast path took what encoding/json refuses: %v", b, typ, err)
			}
			if !reflect.DeepEqual(v.Interface(), p.Elem().Interface()) {
				t.Fatalf("%s into %s: fast %v, encoding/json %v", b, typ, v, p.Elem())
			}
		}
	})
}

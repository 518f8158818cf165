package errand

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestFastArg: the reflection-free Arg decoder gives what encoding/json
// gives, and leaves to it every form it does not handle.
func TestFastArg(t *testing.T) {
	for _, in := range fastArgSeeds {
		checkFastArg(t, in)
	}
}

// FuzzFastArg: on any valid JSON, decoding an Arg gives what encoding/json
// gives.
func FuzzFastArg(f *testing.F) {
	for _, in := range fastArgSeeds {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if json.Valid([]byte(in)) {
			checkFastArg(t, in)
		}
	})
}

var fastArgSeeds = []string{
	`{"name":"","type":"int64","value":5}`,
	`{"name":"a","type":"[]string","value":["x","y,}"]}`,
	`{"type":"main.P","value":{"a":[1,{"b":"}]"}],"c":null},"name":"p"}`,
	` { "name" : "n" , "type" : "string" , "value" : "q\"uo}te" } `,
	`{"name":"n","type":"bool","value":true}`,
	`{"name":"n","type":"float64","value":-1.5e3}`,
	`{"name":"n","type":"x"}`,
	`{}`,
	`{"name":"e\u0301","type":"string","value":"x"}`,
	`{"Name":"upper","type":"string","value":"x"}`,
	`{"name":"n","name":"m","type":"string","value":1}`,
	`{"name":"n","type":"t","value":1,"extra":2}`,
}

func checkFastArg(t *testing.T, in string) {
	t.Helper()
	var w struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	slowErr := json.Unmarshal([]byte(in), &w)
	var fast Arg
	fastErr := json.Unmarshal([]byte(in), &fast)
	if (slowErr == nil) != (fastErr == nil) {
		t.Fatalf("%s: error %v; encoding/json: %v", in, fastErr, slowErr)
	}
	if slowErr != nil {
		return
	}
	slow := Arg{Name: w.Name, Type: w.Type, Value: w.Value}
	if w.Value == nil {
		slow.Value = json.RawMessage("null")
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Errorf("%s: decoded %#v; encoding/json decodes %#v", in, fast, slow)
	}
}

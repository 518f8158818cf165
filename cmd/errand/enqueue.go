package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/errand-go/errand"
)

// argTypes are the Go types an enqueue argument may name as TYPE:VALUE
// (and []TYPE, [][]TYPE, ...).
var argTypes = map[string]reflect.Type{
	"int": reflect.TypeFor[int](), "int8": reflect.TypeFor[int8](), "int16": reflect.TypeFor[int16](),
	"int32": reflect.TypeFor[int32](), "int64": reflect.TypeFor[int64](),
	"uint": reflect.TypeFor[uint](), "uint8": reflect.TypeFor[uint8](), "uint16": reflect.TypeFor[uint16](),
	"uint32": reflect.TypeFor[uint32](), "uint64": reflect.TypeFor[uint64](),
	"float32": reflect.TypeFor[float32](), "float64": reflect.TypeFor[float64](),
	"bool": reflect.TypeFor[bool](), "string": reflect.TypeFor[string](),
	"json": nil, // any JSON value, sent untyped
}

// parseArg reads one argument of `errand enqueue`:
//
//   - TYPE:VALUE, TYPE a Go type of argTypes or a slice of one: VALUE is
//     checked to be that type's JSON (int:3, float64:2.5, bool:true,
//     []int:[1,2]) and sent with TYPE as its type name; for string the
//     rest is the text itself (string:hello world, string:42);
//     json:VALUE sends any JSON value untyped;
//   - otherwise a JSON value (3, 2.5, true, "x", [1,2], {"a":1}) is sent
//     untyped, and a word that is not JSON as a string (hello).
//
// The worker decodes every argument's JSON into its function's parameter
// type, so an untyped 3 serves an int, an int64 or a float64 parameter.
func parseArg(s string) (errand.Arg, error) {
	if name, val, ok := strings.Cut(s, ":"); ok {
		if t, known := argType(name); known {
			return typedArg(name, t, val)
		}
	}
	if json.Valid([]byte(s)) {
		return errand.Arg{Value: compact(s)}, nil
	}
	b, _ := json.Marshal(s)
	return errand.Arg{Type: "string", Value: json.RawMessage(b)}, nil
}

// argType returns the type named name among argTypes and their slices.
func argType(name string) (reflect.Type, bool) {
	if elem, ok := strings.CutPrefix(name, "[]"); ok {
		t, known := argType(elem)
		if !known || t == nil {
			return nil, false
		}
		return reflect.SliceOf(t), true
	}
	t, ok := argTypes[name]
	return t, ok
}

func typedArg(name string, t reflect.Type, val string) (errand.Arg, error) {
	switch {
	case t == nil: // json:
		if !json.Valid([]byte(val)) {
			return errand.Arg{}, fmt.Errorf("json:%s: not a JSON value", val)
		}
		return errand.Arg{Value: compact(val)}, nil
	case t.Kind() == reflect.String:
		b, _ := json.Marshal(val)
		return errand.Arg{Type: name, Value: json.RawMessage(b)}, nil
	}
	dec := json.NewDecoder(strings.NewReader(val))
	if err := dec.Decode(reflect.New(t).Interface()); err != nil || dec.More() || strings.TrimSpace(val) == "null" {
		return errand.Arg{}, fmt.Errorf("%s:%s: %q is not the JSON of a %s", name, val, val, name)
	}
	return errand.Arg{Type: name, Value: compact(val)}, nil
}

func compact(s string) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return json.RawMessage(s)
	}
	return json.RawMessage(b.Bytes())
}

package errand

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

type point struct {
	X, Y int
	Tag  string `json:"tag"`
}

// TestArgumentRoundTrip sends each kind of JSON-encodable value through the
// wire encoding and decodes it into the parameter type, as a worker does.
func TestArgumentRoundTrip(t *testing.T) {
	values := []any{
		42, int64(-7), uint8(200), 3.25, float32(1.5), "héllo", true,
		[]int{1, 2, 3}, []string{"a", "b"}, map[string]int{"a": 1},
		map[string][]float64{"k": {1.5}}, point{1, 2, "p"}, &point{3, 4, "q"},
		[]point{{5, 6, "r"}}, [2]bool{true, false}, json.RawMessage(`{"raw":1}`), []byte("bytes"),
	}
	for _, v := range values {
		sig := NewSignature("t", v)
		b, err := EncodeSignature(sig)
		if err != nil {
			t.Fatalf("%T: encode: %v", v, err)
		}
		dec, err := DecodeSignature(b)
		if err != nil {
			t.Fatalf("%T: decode: %v", v, err)
		}
		got, err := convertArg(dec.Args[0], reflect.TypeOf(v), scalarType(reflect.TypeOf(v)))
		if err != nil {
			t.Fatalf("%T: convert: %v", v, err)
		}
		want := v
		if rm, ok := v.(json.RawMessage); ok {
			var a, b any
			json.Unmarshal(rm, &a)
			json.Unmarshal(got.Interface().(json.RawMessage), &b)
			want, got = a, reflect.ValueOf(b)
		}
		if !reflect.DeepEqual(got.Interface(), want) {
			t.Errorf("%T: round trip gave %#v, want %#v", v, got.Interface(), want)
		}
		if dec.Args[0].Type != reflect.TypeOf(v).String() {
			t.Errorf("%T: Arg.Type %q, want %q", v, dec.Args[0].Type, reflect.TypeOf(v).String())
		}
	}
}

func TestArgumentMismatchNamesTaskIndexAndTypes(t *testing.T) {
	tk, err := newTask("resize", func(ctx context.Context, w int, name string, p point) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []Arg
		want []string
	}{
		{[]Arg{ArgOf(1), ArgOf(2), ArgOf(point{})}, []string{`"resize"`, "argument 1", "int", "string"}},
		{[]Arg{ArgOf("wide"), ArgOf("n"), ArgOf(point{})}, []string{"argument 0", "string", "as int"}},
		{[]Arg{ArgOf(1), ArgOf("n"), ArgOf([]int{1})}, []string{"argument 2", "[]int", "errand.point"}},
		{[]Arg{ArgOf(1)}, []string{"got 1 arguments", "takes 3"}},
	}
	for _, c := range cases {
		_, err := tk.decodeArgs(wire(t, c.args))
		if !errors.Is(err, ErrBadArguments) {
			t.Fatalf("decodeArgs(%v) = %v, want ErrBadArguments", c.args, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	}
}

// wire passes args through the JSON encoding, as a worker receives them.
func wire(t *testing.T, args []Arg) []Arg {
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	var out []Arg
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRegisterValidates(t *testing.T) {
	bad := map[string]any{
		"not a func":      42,
		"no error result": func() int { return 1 },
		"error not last":  func() (error, int) { return nil, 0 },
		"channel param":   func(chan int) error { return nil },
		"func result":     func() (func(), error) { return nil, nil },
		"ctx not first":   func(int, context.Context) error { return nil },
		"nil func":        (func() error)(nil),
	}
	for name, fn := range bad {
		if _, err := newTask("t", fn); err == nil {
			t.Errorf("%s: registered without error", name)
		} else if !strings.Contains(err.Error(), `"t"`) {
			t.Errorf("%s: error %q does not name the task", name, err)
		}
	}
	if _, err := newTask("", func() error { return nil }); err == nil {
		t.Error("empty name registered")
	}
	good := []any{
		func() error { return nil },
		func(ctx context.Context, a, b int) (int, error) { return 0, nil },
		func(xs ...int) (int, string, error) { return 0, "", nil },
		func(m map[string]any, p *point) error { return nil },
	}
	for _, fn := range good {
		if _, err := newTask("t", fn); err != nil {
			t.Errorf("%T: %v", fn, err)
		}
	}
}

func FuzzDecodeSignature(f *testing.F) {
	seed, _ := EncodeSignature(NewSignature("add", 1, "x", []int{2}, map[string]any{"k": true}))
	f.Add(seed)
	f.Add([]byte(`{"UUID":"u","Name":"n","Args":[{"type":"int","value":1}]}`))
	f.Add([]byte(`{"UUID":"u","Name":"n","OnSuccess":[{"UUID":"v","Name":"m"}]}`))
	f.Add([]byte(`not json`))
	tk, err := newTask("add", func(a int, b string) (int, error) { return a, nil })
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sig, err := DecodeSignature(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("decode error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		// A decoded signature re-encodes and decodes to the same wire form.
		b2, err := EncodeSignature(sig)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		sig2, err := DecodeSignature(b2)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		b3, _ := EncodeSignature(sig2)
		if string(b2) != string(b3) {
			t.Fatalf("wire form not stable:\n%s\n%s", b2, b3)
		}
		// Argument conversion never panics; it succeeds or names the problem.
		if _, err := tk.decodeArgs(sig.Args); err != nil && !errors.Is(err, ErrBadArguments) {
			t.Fatalf("decodeArgs error %v does not wrap ErrBadArguments", err)
		}
	})
}

// TestNullArgumentOnlyForNillableParameters: a JSON null is no value for a
// string, number, bool, struct or array parameter (issue 14, item 8: it
// used to run the task with the zero value); pointers, slices, maps and
// interfaces take it as nil.
func TestNullArgumentOnlyForNillableParameters(t *testing.T) {
	tk, err := newTask("greet", func(name string, n int, ok bool, p point, xs [2]int, pp *point, s []int, m map[string]int, a any) error {
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	null := Arg{Type: "nil", Value: json.RawMessage("null")}
	for i, want := range []string{"string", "int", "bool", "errand.point", "[2]int"} {
		args := wire(t, []Arg{ArgOf("x"), ArgOf(1), ArgOf(true), ArgOf(point{}), ArgOf([2]int{}), null, null, null, null})
		args[i] = null
		_, err := tk.decodeArgs(args)
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Index != i || ae.Want != want || !strings.Contains(err.Error(), "null") {
			t.Errorf("null for a %s parameter: %v; want an *ArgumentError at index %d naming null", want, err, i)
		}
	}
	args := wire(t, []Arg{ArgOf("x"), ArgOf(1), ArgOf(true), ArgOf(point{}), ArgOf([2]int{}), null, null, null, null})
	if _, err := tk.decodeArgs(args); err != nil {
		t.Errorf("null for pointer, slice, map and interface parameters: %v; want them nil", err)
	}
	// Through the worker, as a producer sends it: ArgOf(nil).
	if _, err := tk.decodeArgs(wire(t, []Arg{ArgOf(nil), ArgOf(1), ArgOf(true), ArgOf(point{}), ArgOf([2]int{}), null, null, null, null})); !errors.Is(err, ErrBadArguments) {
		t.Errorf("ArgOf(nil) for a string parameter: %v; want ErrBadArguments", err)
	}
}

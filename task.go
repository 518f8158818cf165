package errand

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/errand-go/errand/internal/wirejson"
)

var (
	ctxType   = reflect.TypeFor[context.Context]()
	errorType = reflect.TypeFor[error]()
)

// task is a registered Go function, validated once at registration.
type task struct {
	name     string
	fn       reflect.Value
	takesCtx bool
	variadic bool           // the last param is ...T: any number of trailing args of type T
	params   []reflect.Type // excluding the leading context
	scalar   []bool         // params[i] may be decoded by plainScalar (scalarType)
	results  []reflect.Type // excluding the trailing error
	// resultTypes[i] is results[i].String(); plain[i]: results[i] is
	// encoded by appendPlain.
	resultTypes []string
	plain       []bool
	policy      RetryPolicy // nil: the worker's
	limit       *rateLimit  // nil: none (WithRateLimit)
	concurrency *int        // nil: none (WithConcurrencyLimit)
}

// newTask validates fn: a function whose parameters are an optional leading
// context.Context followed by JSON-decodable values (the last may be
// variadic), and whose results are any number of JSON-encodable values
// followed by an error.
func newTask(name string, fn any) (*task, error) {
	if name == "" {
		return nil, errors.New("errand: register: empty task name")
	}
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return nil, fmt.Errorf("errand: register %q: want a function, got %T", name, fn)
	}
	t := v.Type()
	tk := &task{name: name, fn: v, variadic: t.IsVariadic()}
	for i := 0; i < t.NumIn(); i++ {
		p := t.In(i)
		if i == 0 && p == ctxType {
			tk.takesCtx = true
			continue
		}
		if err := checkJSONType(p); err != nil {
			return nil, fmt.Errorf("errand: register %q: parameter %d (%s): %w", name, i, p, err)
		}
		tk.params = append(tk.params, p)
		if tk.variadic && i == t.NumIn()-1 {
			p = p.Elem()
		}
		tk.scalar = append(tk.scalar, scalarType(p))
	}
	if t.NumOut() == 0 || t.Out(t.NumOut()-1) != errorType {
		return nil, fmt.Errorf("errand: register %q: the last result must be error (%s)", name, t)
	}
	for i := 0; i < t.NumOut()-1; i++ {
		r := t.Out(i)
		if err := checkJSONType(r); err != nil {
			return nil, fmt.Errorf("errand: register %q: result %d (%s): %w", name, i, r, err)
		}
		tk.results = append(tk.results, r)
		tk.resultTypes = append(tk.resultTypes, r.String())
		tk.plain = append(tk.plain, plainKind(r))
	}
	return tk, nil
}

// checkJSONType rejects types encoding/json cannot carry.
func checkJSONType(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return fmt.Errorf("%s values cannot be sent as JSON", t.Kind())
	}
	if t == ctxType {
		return errors.New("context.Context must be the first parameter")
	}
	return nil
}

// decodeArgs converts a signature's arguments to the function's parameter
// types. Any mismatch is an *ArgumentError naming the task, the argument
// index and both types. When the function takes a ctx, the values come
// after a first element left for it (call sets it).
func (tk *task) decodeArgs(args []Arg) ([]reflect.Value, error) {
	fixed := len(tk.params)
	if tk.variadic {
		fixed--
	}
	if len(args) < fixed || (!tk.variadic && len(args) != fixed) {
		want := strconv.Itoa(fixed)
		if tk.variadic {
			want = "at least " + want
		}
		return nil, &ArgumentError{TaskName: tk.name, Index: -1, Got: strconv.Itoa(len(args)), Want: want}
	}
	in := make([]reflect.Value, tk.ctxSlots()+len(args))
	out := in[tk.ctxSlots():]
	for i, a := range args {
		p := min(i, len(tk.params)-1)
		pt := tk.params[p]
		if tk.variadic && i >= fixed {
			pt = pt.Elem()
		}
		v, err := convertArg(a, pt, tk.scalar[p])
		if err != nil {
			got := a.Type
			if got == "" {
				got = "untyped"
			}
			return nil, &ArgumentError{TaskName: tk.name, Index: i, Got: got, Want: pt.String(), Err: err}
		}
		out[i] = v
	}
	return in, nil
}

// ctxSlots is how many values of the function's arguments come before the
// task's: 1 for a function taking a ctx.
func (tk *task) ctxSlots() int {
	if tk.takesCtx {
		return 1
	}
	return 0
}

// convertArg turns one argument into a value of type t. A value still in Go
// form is used directly when its type fits; anything else goes through its
// JSON encoding, as it would on the wire. scalar is scalarType(t).
func convertArg(a Arg, t reflect.Type, scalar bool) (reflect.Value, error) {
	var raw []byte
	switch v := a.Value.(type) {
	case json.RawMessage:
		raw = v
	default:
		if v != nil && reflect.TypeOf(v).AssignableTo(t) {
			return reflect.ValueOf(v), nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return reflect.Value{}, err
		}
		raw = b
	}
	if !nillable(t) && string(bytes.TrimSpace(raw)) == "null" {
		// encoding/json leaves the zero value for null: a task would run
		// with "" or 0 it was never given.
		return reflect.Value{}, fmt.Errorf("JSON null does not decode into %s", t)
	}
	if scalar {
		if v, ok := plainScalar(raw, t); ok {
			return v, nil
		}
	}
	p := reflect.New(t)
	if err := json.Unmarshal(raw, p.Interface()); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return reflect.Value{}, fmt.Errorf("JSON %s does not decode into %s", ute.Value, t)
		}
		return reflect.Value{}, err
	}
	return p.Elem(), nil
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// fastScalar decodes raw (valid JSON) into a signed integer or a string
// parameter without encoding/json when raw is a plain integer that fits,
// or a string without escapes, and t decodes itself in no way of its own;
// it reports false for anything else, left to encoding/json.
func fastScalar(raw []byte, t reflect.Type) (reflect.Value, bool) {
	if !scalarType(t) {
		return reflect.Value{}, false
	}
	return plainScalar(raw, t)
}

// scalarType reports whether values of t may be decoded by plainScalar: a
// signed integer or a string that decodes itself in no way of its own.
func scalarType(t reflect.Type) bool {
	k := t.Kind()
	if k != reflect.String && (k < reflect.Int || k > reflect.Int64) {
		return false
	}
	pt := reflect.PointerTo(t)
	return !pt.Implements(jsonUnmarshalerType) && !pt.Implements(textUnmarshalerType)
}

var (
	intType    = reflect.TypeFor[int]()
	int64Type  = reflect.TypeFor[int64]()
	stringType = reflect.TypeFor[string]()
)

// plainScalar is fastScalar for a t of scalarType.
func plainScalar(raw []byte, t reflect.Type) (reflect.Value, bool) {
	i := wirejson.SkipSpace(raw, 0)
	if t.Kind() == reflect.String {
		b, end, ok := wirejson.Plain(raw, i)
		if !ok || wirejson.SkipSpace(raw, end) != len(raw) {
			return reflect.Value{}, false
		}
		str := string(b)
		if t == stringType {
			return reflect.ValueOf(str), true
		}
		v := reflect.New(t).Elem()
		v.SetString(str)
		return v, true
	}
	end := i
	for end < len(raw) && raw[end] != ' ' && raw[end] != '\t' && raw[end] != '\n' && raw[end] != '\r' {
		end++
	}
	if wirejson.SkipSpace(raw, end) != len(raw) {
		return reflect.Value{}, false
	}
	n, ok := wirejson.Int(raw[i:end], t.Bits())
	if !ok {
		return reflect.Value{}, false
	}
	// int and int64 without reflect.New: a small one is not even
	// allocated (the runtime's boxes of 0-255).
	switch t {
	case int64Type:
		return reflect.ValueOf(n), true
	case intType:
		return reflect.ValueOf(int(n)), true
	}
	v := reflect.New(t).Elem()
	v.SetInt(n)
	return v, true
}

// nillable reports whether nil is a value of t (a JSON null decodes to it).
func nillable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

// call runs the function with args, as decodeArgs returns them, and
// encodes its results.
func (tk *task) call(ctx context.Context, args []reflect.Value) ([]Result, error) {
	in := args // decodeArgs left the first for the ctx
	if tk.takesCtx {
		in[0] = reflect.ValueOf(ctx)
	}
	out := tk.fn.Call(in)
	if errV := out[len(out)-1]; !errV.IsNil() {
		return nil, errV.Interface().(error)
	}
	results := make([]Result, 0, len(out)-1)
	for i, v := range out[:len(out)-1] {
		var b []byte
		if tk.plain[i] {
			b = appendPlain(nil, v)
		} else {
			var err error
			if b, err = json.Marshal(v.Interface()); err != nil {
				return nil, Permanent(fmt.Errorf("errand: task %q: encode result %d (%s): %w", tk.name, i, tk.results[i], err))
			}
		}
		results = append(results, Result{Type: tk.resultTypes[i], Value: b})
	}
	return results, nil
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// plainKind reports whether encoding/json writes values of t as plain
// JSON: an integer, a bool or a string, of a type with no encoding of its
// own (appendPlain writes those).
func plainKind(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Bool, reflect.String:
	default:
		return false
	}
	pt := reflect.PointerTo(t)
	return !t.Implements(jsonMarshalerType) && !t.Implements(textMarshalerType) &&
		!pt.Implements(jsonMarshalerType) && !pt.Implements(textMarshalerType)
}

// appendPlain appends json.Marshal(v.Interface()) to b, for a v of a
// plainKind type.
func appendPlain(b []byte, v reflect.Value) []byte {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.String:
		s := v.String()
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				q, _ := json.Marshal(s) // an escape (encoding/json's, HTML-safe): a string always encodes
				return append(b, q...)
			}
		}
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	default: // unsigned
		return strconv.AppendUint(b, v.Uint(), 10)
	}
}

// resultArgs turns results into arguments for the next task of a workflow.
func resultArgs(rs []Result) []Arg {
	args := make([]Arg, len(rs))
	for i, r := range rs {
		args[i] = Arg{Type: r.Type, Value: json.RawMessage(r.Value)}
	}
	return args
}

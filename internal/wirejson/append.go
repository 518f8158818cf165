// Package wirejson reads and writes errand's own JSON — a Signature's
// wire form (package errand) and a task state's (package statejson) —
// without reflection, byte for byte as encoding/json does.
//
// # Writing
//
// The Append functions write as encoding/json's Marshal writes (HTML
// characters, U+2028 and U+2029 escaped, invalid UTF-8 replaced, floats
// in ES6 form, times in RFC 3339 with nanoseconds). What they cannot
// write so (a value of another type, a time outside years 0-9999, a
// float that is NaN or infinite, raw JSON that is not valid) they
// report, and the caller encodes the whole value with encoding/json
// instead, so that output and errors stay encoding/json's.
//
// # Reading
//
// The scanning functions (scan.go) read the plain forms those writers
// produce — strings without escapes, integers without fraction or
// exponent, times in UTC — from a string or a []byte, and decline
// anything else, which the caller then leaves to encoding/json's
// Unmarshal. They never take what encoding/json would refuse.
//
// The fuzz tests of both callers, and this package's own, compare the
// results with encoding/json's.
package wirejson

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// AppendString appends s as encoding/json writes a string (HTML-escaped).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendTime appends t as its MarshalJSON writes it; false (dst as it
// was) where MarshalJSON fails.
func AppendTime(dst []byte, t time.Time) ([]byte, bool) {
	out, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst, false // out is nil
	}
	return append(out, '"'), true
}

// AppendFloat appends f, of bits 32 or 64, as encoding/json writes it;
// false where it fails (NaN, infinities).
func AppendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// AppendValue appends v, a value of one of the types a task's arguments
// usually have (nil, string, bool, the integer and float types), as
// encoding/json writes it; false for any other type, or a value it
// cannot write.
func AppendValue(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return AppendString(dst, x), true
	case bool:
		return strconv.AppendBool(dst, x), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case float64:
		return AppendFloat(dst, x, 64)
	case float32:
		return AppendFloat(dst, float64(x), 32)
	}
	return dst, false
}

// AppendRaw appends raw JSON as encoding/json writes a json.RawMessage:
// null when nil, else compacted, HTML-escaped; false (dst as it was)
// when raw is not valid JSON.
func AppendRaw(dst []byte, raw []byte) ([]byte, bool) {
	if raw == nil {
		return append(dst, "null"...), true
	}
	if !json.Valid(raw) {
		return dst, false
	}
	if plainRaw(raw) {
		return append(dst, raw...), true
	}
	var c bytes.Buffer
	if json.Compact(&c, raw) != nil {
		return dst, false
	}
	var h bytes.Buffer
	json.HTMLEscape(&h, c.Bytes())
	return append(dst, h.Bytes()...), true
}

// plainRaw reports whether valid JSON raw is written as it is: no
// whitespace (compact removes it between tokens; in a string it stays,
// but such values take the slow path), no HTML characters and no byte
// 0xE2 (U+2028 and U+2029 begin with it) to escape.
func plainRaw(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return true
}

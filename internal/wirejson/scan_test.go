package wirejson

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzValidValue: the quick check of one value's JSON agrees with
// json.Valid.
func FuzzValidValue(f *testing.F) {
	for _, in := range []string{`1`, `-0`, `01`, `1.`, `1.5e+3`, `-`, `1e`, `"x"`, `"a\"b"`, `"\x01"`, `true`, `nul`, `[1]`, `{"a":1}`, `[1}`, ``} {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidValue(b), json.Valid(b); got != want {
			t.Fatalf("ValidValue(%q) = %v; json.Valid: %v", b, got, want)
		}
	})
}

// FuzzScan: each scanning function reads a string and a []byte alike,
// and what it takes is what encoding/json decodes.
func FuzzScan(f *testing.F) {
	for _, in := range []string{`"x"`, `"é"`, "\"\xff\"", `"a\"b"`, ` 12,`, `-0`, `01`, `1e2`, `123456789012345678`, `[1,"]"]`, `{"a":{"b":[]}}`, `"2026-11-26T16:00:00.5Z"`, `"2024-02-29T00:00:00Z"`, `"2026-02-29T00:00:00Z"`} {
		f.Add(in, 0)
	}
	f.Fuzz(func(t *testing.T, s string, i int) {
		if i < 0 || i > len(s) {
			return
		}
		b := []byte(s)
		if SkipSpace(s, i) != SkipSpace(b, i) {
			t.Fatalf("SkipSpace(%q, %d): string and []byte differ", s, i)
		}
		ps, pe, pok := Plain(s, i)
		pb, pbe, pbok := Plain(b, i)
		if ps != string(pb) || pe != pbe || pok != pbok {
			t.Fatalf("Plain(%q, %d): string %q %d %v, []byte %q %d %v", s, i, ps, pe, pok, pb, pbe, pbok)
		}
		if pok {
			var want string
			if err := json.Unmarshal(b[i:pe], &want); err != nil || want != ps {
				t.Fatalf("Plain(%q, %d) = %q; encoding/json: %q, %v", s, i, ps, want, err)
			}
		}
		end := SkipValue(s, i)
		if end != SkipValue(b, i) {
			t.Fatalf("SkipValue(%q, %d): string and []byte differ", s, i)
		}
		if end > i {
			n, ok := Int(s[i:end], 64)
			nb, okb := Int(b[i:end], 64)
			if n != nb || ok != okb {
				t.Fatalf("Int(%q): string and []byte differ", s[i:end])
			}
			var want int64
			if ok && (json.Unmarshal(b[i:end], &want) != nil || want != n) {
				t.Fatalf("Int(%q) = %d; encoding/json: %d", s[i:end], n, want)
			}
		}
		tm, te, tok := UTCTime(s, i)
		tmb, teb, tokb := UTCTime(b, i)
		if !tm.Equal(tmb) || te != teb || tok != tokb {
			t.Fatalf("UTCTime(%q, %d): string and []byte differ", s, i)
		}
		if tok {
			var want time.Time
			if err := json.Unmarshal(b[i:te], &want); err != nil || want != tm {
				t.Fatalf("UTCTime(%q, %d) = %v; encoding/json: %v, %v", s, i, tm, want, err)
			}
		}
	})
}

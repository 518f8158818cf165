package redistest

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// Script is a case of CheckPrologues: a script, the name its first line
// gives, and the keys its Go helper builds, in order.
type Script struct {
	Name   string
	Script *goredis.Script
	Keys   []string
}

// ScriptTexts is a driver's set of scripts with their text
// (*redisconn.Scripts).
type ScriptTexts interface {
	Text(*goredis.Script) (string, bool)
	Len() int
}

// CheckPrologues checks the promise of the drivers' scripts ("How a
// script reads"): each script of set opens with its name and a prologue
// naming its KEYS (-- KEYS[1] -> K:pending) in the order its Go helper
// builds them, binds each key to a local once (the body never reads KEYS
// itself), and names its ARGV before it reads any. short writes a key as
// the prologue does (the hash tag as a letter). cases must cover every
// script of set.
func CheckPrologues(t testing.TB, set ScriptTexts, cases []Script, short func(key string) string) {
	t.Helper()
	if len(cases) != set.Len() {
		t.Errorf("%d scripts made by newScript, %d checked here: add the new ones to the table", set.Len(), len(cases))
	}
	for _, c := range cases {
		text, ok := set.Text(c.Script)
		if !ok {
			t.Errorf("%s: not made by newScript", c.Name)
			continue
		}
		want := make([]string, len(c.Keys))
		for i, key := range c.Keys {
			want[i] = short(key)
		}
		if err := checkPrologue(c.Name, text, want); err != nil {
			t.Errorf("%s: %v (the prologue must name the keys its Go helper builds, in that order)", c.Name, err)
		}
	}
}

var prologueKey = regexp.MustCompile(`^-- KEYS\[(\d+)\]\s+-> (\S+)$`)

func checkPrologue(name, text string, keys []string) error {
	lines := strings.Split(strings.TrimPrefix(text, "\n"), "\n")
	if lines[0] != "-- "+name {
		return fmt.Errorf("first line %q, want %q", lines[0], "-- "+name)
	}
	var named []string
	var argv bool
	reads := 0
	for _, l := range lines {
		if m := prologueKey.FindStringSubmatch(l); m != nil {
			if m[1] != fmt.Sprint(len(named)+1) {
				return fmt.Errorf("KEYS[%s] named where KEYS[%d] is due", m[1], len(named)+1)
			}
			named = append(named, m[2])
			continue
		}
		argv = argv || strings.HasPrefix(l, "-- ARGV[")
		if code, _, _ := strings.Cut(l, "--"); strings.Contains(code, "ARGV") && !argv {
			return fmt.Errorf("reads ARGV before its prologue names it: %q", l)
		}
		if code, _, _ := strings.Cut(l, "--"); !strings.HasPrefix(l, "--") {
			reads += strings.Count(code, "KEYS[")
		}
	}
	if fmt.Sprint(named) != fmt.Sprint(keys) {
		return fmt.Errorf("prologue names KEYS %v, the Go helper builds %v", named, keys)
	}
	if reads != len(keys) {
		return fmt.Errorf("reads KEYS[...] %d times, want once per key (bind each to a local)", reads)
	}
	return nil
}

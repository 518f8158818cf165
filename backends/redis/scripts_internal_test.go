package redisbackend

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

var prologueKey = regexp.MustCompile(`^-- KEYS\[(\d+)\]\s+-> (\S+)$`)

// TestScriptPrologues: every script opens with its name and a prologue
// naming its KEYS in the order its Go helper builds them (G for the
// group's hash tag), binds each key to a local once (the body never reads
// KEYS itself), and names its ARGV when it reads any. The promise is the
// key table's in backend.go.
func TestScriptPrologues(t *testing.T) {
	b := &Backend{opts: Options{Prefix: "prefix"}}
	cases := []struct {
		name   string
		script *goredis.Script
		keys   []string
	}{
		{"initGroup", initGroupScript, b.groupScriptKeys("GROUP")},
		{"complete", completeScript, b.groupScriptKeys("GROUP")},
		{"claim", claimScript, b.claimKeys("GROUP")},
		{"start", startScript, b.startKeys("UUID")},
		{"mcomplete", mComplete, mCompleteKeys("GROUP")},
		{"mclaim", mClaim, mClaimKeys("GROUP")},
		{"mstart", mStart, mStartKeys("UUID")},
	}
	if len(cases) != len(scriptText) {
		t.Errorf("%d scripts made by newScript, %d checked here: add the new ones to the table", len(scriptText), len(cases))
	}
	for _, c := range cases {
		text, ok := scriptText[c.script]
		if !ok {
			t.Errorf("%s: not made by newScript", c.name)
			continue
		}
		if err := checkPrologue(c.name, text, c.keys); err != nil {
			t.Errorf("%s: %v (the prologue must name the keys its Go helper builds, in that order)", c.name, err)
		}
	}
}

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
	want := make([]string, len(keys))
	for i, key := range keys {
		want[i] = strings.Replace(key, "{prefix:group:GROUP}", "G", 1)
	}
	if fmt.Sprint(named) != fmt.Sprint(want) {
		return fmt.Errorf("prologue names KEYS %v, the Go helper builds %v", named, want)
	}
	if reads != len(keys) {
		return fmt.Errorf("reads KEYS[...] %d times, want once per key (bind each to a local)", reads)
	}
	return nil
}

package redisbroker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

var prologueKey = regexp.MustCompile(`^-- KEYS\[(\d+)\]\s+-> (\S+)$`)

// TestScriptPrologues: every script opens with its name and a prologue
// naming its KEYS in the order its Go helper builds them (K for the
// queue's hash tag, P for the prefix's), binds each key to a local once
// (the body never reads KEYS itself), and names its ARGV when it reads
// any. The promise is scripts.go's "How a script reads".
func TestScriptPrologues(t *testing.T) {
	b := &Broker{opts: Options{Prefix: "errand"}}
	k := b.keys("q")
	mk := (&MachineryBroker{opts: MachineryOptions{Prefix: "errand", DelayedTasksKey: "delayed_tasks", DefaultQueue: "machinery_tasks"}}).keys("q")
	cases := []struct {
		name   string
		script *goredis.Script
		keys   []string
	}{
		{"publish", publishScript, k.publishKeys()},
		{"fetch", fetchScript, k.fetchKeys()},
		{"ack", ackScript, k.ackKeys()},
		{"ackStates", ackStatesScript, k.ackStatesKeys(nil)},
		{"release", releaseScript, k.releaseKeys()},
		{"extend", extendScript, k.extendKeys()},
		{"archive", archiveScript, k.archiveKeys()},
		{"requeue", requeueScript, k.requeueKeys()},
		{"archived", archivedScript, k.archivedKeys()},
		{"deleteArchived", deleteArchivedScript, k.deleteArchivedKeys()},
		{"migrate", migrateScript, k.migrateKeys()},
		{"purge", purgeScript, k.purgeKeys()},
		{"scheduled", scheduledScript, k.scheduledKeys()},
		{"inflight", inflightScript, k.inflightKeys()},
		{"pending", pendingScript, k.pendingKeys()},
		{"find", findScript, k.findKeys()},
		{"unlist", unlistScript, k.unlistKeys()},
		{"relist", relistScript, k.relistKeys()},
		{"beat", beatScript, b.beatKeys()},
		{"beats", beatsScript, b.beatKeys()},
		{"unbeat", unbeatScript, b.beatKeys()},
		{"claimTick", claimTickScript, b.scheduleKeys()},
		{"deleteSchedule", deleteScheduleScript, b.scheduleKeys()},
		{"take", takeScript, b.takeKeys("KEY")},
		{"lock", lockScript, b.lockKeys("KEY")},
		{"unlock", unlockScript, b.lockKeys("KEY")},
		{"mfetch", mFetch, mk.fetchKeys()},
		{"mdue", mDue, mk.dueKeys()},
		{"mpromote", mPromote, mk.promoteKeys()},
		{"msettle", mSettle, mk.settleKeys()},
		{"mrelease", mRelease, mk.releaseKeys()},
		{"mextend", mExtend, mk.extendKeys()},
		{"mreject", mReject, mk.rejectKeys()},
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
		key = strings.Replace(key, "{errand:q}", "K", 1)
		want[i] = strings.Replace(key, "{errand}", "P", 1)
	}
	if fmt.Sprint(named) != fmt.Sprint(want) {
		return fmt.Errorf("prologue names KEYS %v, the Go helper builds %v", named, want)
	}
	if reads != len(keys) {
		return fmt.Errorf("reads KEYS[...] %d times, want once per key (bind each to a local)", reads)
	}
	return nil
}

// TestEveryScriptCallWithoutRetries: every script call goes through the
// broker's NoRetry scripter (b.scripts) or a NoRetry pipeline, never the
// bare client, whose go-redis retries would run a script twice.
func TestEveryScriptCallWithoutRetries(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	bare := regexp.MustCompile(`\.(Run|RunRO|Eval|EvalSha|EvalRO|EvalShaRO)\(ctx, b\.rdb\b`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if bare.MatchString(line) {
				t.Errorf("no-retry promise broken: %s:%d runs a script on the bare client (go-redis may send it twice); use b.scripts or redisconn.NoRetry", f, i+1)
			}
		}
	}
}

package redisbroker

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestScriptPrologues: every script opens with its name and a prologue
// naming its KEYS in the order its Go helper builds them (K for the
// queue's hash tag, P for the prefix's), binds each key to a local once
// (the body never reads KEYS itself), and names its ARGV when it reads
// any. The promise is scripts.go's "How a script reads".
func TestScriptPrologues(t *testing.T) {
	b := &Broker{opts: Options{Prefix: "errand"}}
	k := b.keys("q")
	mk := (&MachineryBroker{opts: MachineryOptions{Prefix: "errand", DelayedTasksKey: "delayed_tasks", DefaultQueue: "machinery_tasks"}}).keys("q")
	cases := []redistest.Script{
		{Name: "publish", Script: publishScript, Keys: k.publishKeys()},
		{Name: "fetch", Script: fetchScript, Keys: k.fetchKeys()},
		{Name: "ack", Script: ackScript, Keys: k.ackKeys()},
		{Name: "ackStates", Script: ackStatesScript, Keys: k.ackStatesKeys(nil)},
		{Name: "release", Script: releaseScript, Keys: k.releaseKeys()},
		{Name: "extend", Script: extendScript, Keys: k.extendKeys()},
		{Name: "archive", Script: archiveScript, Keys: k.archiveKeys()},
		{Name: "requeue", Script: requeueScript, Keys: k.requeueKeys()},
		{Name: "archived", Script: archivedScript, Keys: k.archivedKeys()},
		{Name: "deleteArchived", Script: deleteArchivedScript, Keys: k.deleteArchivedKeys()},
		{Name: "migrate", Script: migrateScript, Keys: k.migrateKeys()},
		{Name: "purge", Script: purgeScript, Keys: k.purgeKeys()},
		{Name: "scheduled", Script: scheduledScript, Keys: k.scheduledKeys()},
		{Name: "inflight", Script: inflightScript, Keys: k.inflightKeys()},
		{Name: "pending", Script: pendingScript, Keys: k.pendingKeys()},
		{Name: "find", Script: findScript, Keys: k.findKeys()},
		{Name: "unlist", Script: unlistScript, Keys: k.unlistKeys()},
		{Name: "relist", Script: relistScript, Keys: k.relistKeys()},
		{Name: "beat", Script: beatScript, Keys: b.beatKeys()},
		{Name: "beats", Script: beatsScript, Keys: b.beatKeys()},
		{Name: "unbeat", Script: unbeatScript, Keys: b.beatKeys()},
		{Name: "claimTick", Script: claimTickScript, Keys: b.scheduleKeys()},
		{Name: "deleteSchedule", Script: deleteScheduleScript, Keys: b.scheduleKeys()},
		{Name: "take", Script: takeScript, Keys: b.takeKeys("KEY")},
		{Name: "lock", Script: lockScript, Keys: b.lockKeys("KEY")},
		{Name: "unlock", Script: unlockScript, Keys: b.lockKeys("KEY")},
		{Name: "acquire", Script: acquireScript, Keys: b.slotKeys(nil)},
		{Name: "renew", Script: renewScript, Keys: b.slotKeys(nil)},
		{Name: "free", Script: freeScript, Keys: b.slotKeys(nil)},
		{Name: "mfetch", Script: mFetch, Keys: mk.fetchKeys()},
		{Name: "mdue", Script: mDue, Keys: mk.dueKeys()},
		{Name: "mpromote", Script: mPromote, Keys: mk.promoteKeys()},
		{Name: "msettle", Script: mSettle, Keys: mk.settleKeys()},
		{Name: "mrelease", Script: mRelease, Keys: mk.releaseKeys()},
		{Name: "mextend", Script: mExtend, Keys: mk.extendKeys()},
		{Name: "mreject", Script: mReject, Keys: mk.rejectKeys()},
	}
	redistest.CheckPrologues(t, &scripts, cases, func(key string) string {
		key = strings.Replace(key, "{errand:q}", "K", 1)
		return strings.Replace(key, "{errand}", "P", 1)
	})
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

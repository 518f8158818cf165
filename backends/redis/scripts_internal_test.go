package redisbackend

import (
	"strings"
	"testing"

	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestScriptPrologues: every script opens with its name and a prologue
// naming its KEYS in the order its Go helper builds them (G for the
// group's hash tag), binds each key to a local once (the body never reads
// KEYS itself), and names its ARGV when it reads any. The promise is the
// key table's in backend.go.
func TestScriptPrologues(t *testing.T) {
	b := &Backend{opts: Options{Prefix: "prefix"}}
	cases := []redistest.Script{
		{Name: "initGroup", Script: initGroupScript, Keys: b.groupScriptKeys("GROUP")},
		{Name: "complete", Script: completeScript, Keys: b.groupScriptKeys("GROUP")},
		{Name: "claim", Script: claimScript, Keys: b.claimKeys("GROUP")},
		{Name: "start", Script: startScript, Keys: b.startKeys("UUID")},
		{Name: "mcomplete", Script: mComplete, Keys: mCompleteKeys("GROUP")},
		{Name: "mclaim", Script: mClaim, Keys: mClaimKeys("GROUP")},
		{Name: "mstart", Script: mStart, Keys: mStartKeys("UUID")},
		{Name: "cancel", Script: cancelScript, Keys: b.cancelKeys("UUID")},
		{Name: "setState", Script: setStateScript, Keys: b.setStateKeys("UUID")},
		{Name: "mcancel", Script: mCancel, Keys: mCancelKeys("UUID")},
		{Name: "msetState", Script: mSetState, Keys: mSetStateKeys("UUID")},
	}
	redistest.CheckPrologues(t, &scripts, cases, func(key string) string {
		return strings.Replace(key, "{prefix:group:GROUP}", "G", 1)
	})
}

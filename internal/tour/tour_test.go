package tour

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestRunPasses runs the whole tour: every step must pass and print its
// result, in order, followed by the summary.
func TestRunPasses(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), &out); err != nil {
		t.Fatalf("Run = %v, want nil (every step right):\n%s", err, out.String())
	}
	got := out.String()
	want := []string{
		"errand demo — in-memory broker and backend",
		"[1/6] task   ok   add(2, 3) = 5",
		"[2/6] retry  ok   flaky failed twice, then succeeded on attempt 3 (3 runs)",
		"[3/6] delay  ok   due in 500ms, ran ",
		"[4/6] chain  ok   add(1, 2) → mul(10, ·) → add(5, ·) = 35",
		"[5/6] group  ok   10 tasks in parallel: [1 4 9 16 25 36 49 64 81 100]",
		"[6/6] chord  ok   100 squares, callback sum = 338350",
		"6 of 6 steps passed in ",
	}
	at := 0
	for _, w := range want {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("tour output lacks %q after byte %d (the steps print in order):\n%s", w, at, got)
		}
		at += i + len(w)
	}
	if strings.Contains(got, "FAIL") {
		t.Errorf("tour output has a FAIL line although Run returned nil:\n%s", got)
	}
}

// TestRunCanceled: a context already done fails the tour's steps, and Run
// says so instead of hanging or claiming success.
func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	err := Run(ctx, &out)
	if err == nil {
		t.Fatalf("Run on a canceled context = nil, want an error:\n%s", out.String())
	}
	if !regexp.MustCompile(`\d+ steps failed`).MatchString(err.Error()) {
		t.Errorf("Run on a canceled context = %q, want it to count the failed steps", err)
	}
}

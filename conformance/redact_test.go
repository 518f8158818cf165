package conformance

import "testing"

// TestRedactionCheckFindsLeaks: the check behind RunOpenRedaction finds a
// secret in a text and passes a clean one.
func TestRedactionCheckFindsLeaks(t *testing.T) {
	if got := leaks("dial redis://alice:hunter2@h: refused", []string{"hunter2"}); len(got) != 1 {
		t.Fatalf("leaks missed a password in plain sight: %v", got)
	}
	if got := leaks("dial redis://alice:xxxxx@h: refused", []string{"hunter2"}); len(got) != 0 {
		t.Fatalf("leaks reported %v in a redacted text", got)
	}
}

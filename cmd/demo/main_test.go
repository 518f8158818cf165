package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemoPasses runs go run ./cmd/demo's code, the README's first command:
// it must exit 0 and print every step's result.
func TestDemoPasses(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, &out, &errOut); code != 0 {
		t.Fatalf("demo exited %d, want 0 (every step of the tour right):\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"add(2, 3) = 5", "attempt 3", "= 35", "callback sum = 338350", "6 of 6 steps passed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDemoRejectsArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"extra"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage") {
		t.Fatalf("demo extra: exit %d, stderr %q; want exit 2 and a usage line", code, errOut.String())
	}
	if out.Len() != 0 {
		t.Errorf("demo with a usage error ran the tour anyway:\n%s", out.String())
	}
}

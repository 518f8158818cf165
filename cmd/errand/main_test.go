package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoPasses(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"demo"}, &out, &errOut, nil); code != 0 {
		t.Fatalf("errand demo exited %d:\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"add(2, 3) = 5", "attempt 3", "= 35", "callback sum = 338350", "6 of 6 steps passed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"bogus"}, &out, &errOut, nil); code != 2 || !strings.Contains(errOut.String(), `"bogus"`) {
		t.Fatalf("unknown command: exit %d, stderr %q", code, errOut.String())
	}
}

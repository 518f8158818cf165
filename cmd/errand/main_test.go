package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/errand-go/errand/internal/tour"
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

// TestDemoIsTheTour: errand demo prints the same tour as go run ./cmd/demo
// (the README's first command), both being internal/tour's Run; only the
// measured durations may differ.
func TestDemoIsTheTour(t *testing.T) {
	var cli, errOut, direct bytes.Buffer
	if code := run(context.Background(), []string{"demo"}, &cli, &errOut, nil); code != 0 {
		t.Fatalf("errand demo exited %d:\n%s\n%s", code, cli.String(), errOut.String())
	}
	if err := tour.Run(context.Background(), &direct); err != nil {
		t.Fatalf("tour.Run = %v:\n%s", err, direct.String())
	}
	durations := regexp.MustCompile(`[0-9.]+(ns|µs|ms|s)\b`)
	a, b := durations.ReplaceAllString(cli.String(), "D"), durations.ReplaceAllString(direct.String(), "D")
	if a != b {
		t.Errorf("errand demo and go run ./cmd/demo print different tours (durations blanked):\nerrand demo:\n%s\ntour.Run:\n%s", a, b)
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"bogus"}, &out, &errOut, nil); code != 2 || !strings.Contains(errOut.String(), `"bogus"`) {
		t.Fatalf("unknown command: exit %d, stderr %q", code, errOut.String())
	}
}

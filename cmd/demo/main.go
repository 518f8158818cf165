// Command demo runs errand's tour on the embedded in-memory broker and
// backend: a task, a task that fails twice and succeeds on retry, a delayed
// task, a chain, a group and a chord of 100 tasks, each result printed. It
// exits 0 only if every result is right, 1 if one is wrong, 2 on a usage
// error.
//
//	go run ./cmd/demo
//
// It is the same tour as the installed CLI's errand demo (cmd/errand), but
// it is in the root module and links no third-party code, so its first run
// from a clone builds in seconds rather than compiling every driver's SDK.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/errand-go/errand/internal/tour"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the tour, printing it to stdout, and returns the exit code. It
// takes no arguments.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: go run ./cmd/demo (it takes no arguments; it is the same tour as errand demo)")
		return 2
	}
	if err := tour.Run(ctx, stdout); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

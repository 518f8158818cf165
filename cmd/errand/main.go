// Command errand is errand's command-line tool.
//
//	errand demo      run the whole story on the embedded in-memory drivers
//	errand version   print the version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

const version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "demo":
		if err := demo(ctx, stdout); err != nil {
			fmt.Fprintln(stderr, "errand demo:", err)
			return 1
		}
		return 0
	case "version":
		fmt.Fprintln(stdout, "errand", version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "errand: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: errand <command>

commands:
  demo      run a tour of errand on the embedded in-memory broker and backend:
            a task, retries, a delayed task, a chain, a group and a chord
  version   print the version
`)
}

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
	"runtime/debug"
)

// version is the module version the binary was built from (as `go install
// .../cmd/errand@vX` records it), or "devel" for a build from a checkout.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

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
		fmt.Fprintln(stdout, "errand", version())
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
